package events

const hexDigits = "0123456789abcdef"

// appendEscapedASCII appends the JSON escape of ASCII byte b: the two-character
// escapes for \" \\ \b \f \n \r \t, \u00XX for everything else. The RFC 8785
// writer (jcs.go) uses it for the bytes it escapes.
func appendEscapedASCII(dst []byte, b byte) []byte {
	switch b {
	case '\\', '"':
		return append(dst, '\\', b)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
}
