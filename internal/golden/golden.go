// Package golden reads and writes golden files of exact binary encodings:
// one "name hex" line per value, lines starting with '#' are comments. The
// format tests of the packages that store or send bytes (namespace, paxos,
// sequencer) pin their encodings in such files, so that a changed line is
// a visible format change.
package golden

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// Value is one pinned encoding.
type Value struct {
	Name  string
	Bytes []byte
}

// Write writes values to path, after header as a comment line.
func Write(path, header string, values []Value) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n", header)
	for _, v := range values {
		fmt.Fprintf(&b, "%s %x\n", v.Name, v.Bytes)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Read returns the values of path by name. A line that is not a name, one
// space and hex is an error naming the line.
func Read(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, h, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("%s:%d: not a \"name hex\" line", path, n)
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", path, n, name, err)
		}
		out[name] = b
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
