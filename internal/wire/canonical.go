package wire

// canonical is the one canonical-form rule of every format built on this
// package: the bytes taken as the encoding of a value are accepted only if
// they are exactly the bytes the Writer writes for the value read — as long
// (readLen == writtenLen) and equal (sameBytes). Varints (Reader.Uvarint,
// Reader.Varint) and whole lenient-read encodings (Canonical) both go
// through it. A varint's caller passes sameBytes true: two encodings of one
// number of the same length are the same bytes, so for a varint the rule
// is that its length is the minimal one, checked without re-encoding.
func canonical(readLen, writtenLen int, sameBytes bool) bool {
	return readLen == writtenLen && sameBytes
}

// Canonical checks that input, which a lenient reader decoded, is exactly
// written, the encoding of the decoded value. It returns nil, or an *Error
// wrapping ErrNonCanonical whose Pos is the first byte where they differ
// and whose What is what.
func Canonical(input, written []byte, what string) error {
	if canonical(len(input), len(written), string(input) == string(written)) {
		return nil
	}
	pos := 0
	for pos < len(input) && pos < len(written) && input[pos] == written[pos] {
		pos++
	}
	return &Error{Pos: pos, What: what, Err: ErrNonCanonical, Detail: "not the encoding the writer gives"}
}
