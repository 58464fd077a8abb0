package wire

// canonical is the one canonical-form rule of every format built on this
// package: read, the bytes taken as the encoding of a value, is accepted
// only if it is exactly written, the bytes the Writer writes for the value
// read. Varints (Reader.Uvarint, Reader.Varint) and whole lenient-read
// encodings (Canonical) both go through it.
func canonical(read, written []byte) bool {
	return string(read) == string(written)
}

// Canonical checks that input, which a lenient reader decoded, is exactly
// written, the encoding of the decoded value. It returns nil, or an *Error
// wrapping ErrNonCanonical whose Pos is the first byte where they differ
// and whose What is what.
func Canonical(input, written []byte, what string) error {
	if canonical(input, written) {
		return nil
	}
	pos := 0
	for pos < len(input) && pos < len(written) && input[pos] == written[pos] {
		pos++
	}
	return &Error{Pos: pos, What: what, Err: ErrNonCanonical, Detail: "not the encoding the writer gives"}
}
