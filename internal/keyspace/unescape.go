package keyspace

import "strings"

// Unescape reverses Escape: it returns the s that Escape turned into
// escaped, and true; or false if escaped is not something Escape returns
// (a reserved byte left as it is, a '%' not followed by the escape of a
// reserved byte). Programs that read names back, such as a listing of
// lease records, use it with the name's tag.
func Unescape(escaped string) (string, bool) {
	i := strings.IndexByte(escaped, '%')
	if i < 0 {
		return escaped, !strings.ContainsAny(escaped, Reserved)
	}
	var b strings.Builder
	b.Grow(len(escaped))
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c != '%' {
			if isReserved(c) {
				return "", false
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(escaped) {
			return "", false
		}
		d, ok := unhex(escaped[i+1], escaped[i+2])
		if !ok || !isReserved(d) {
			return "", false
		}
		b.WriteByte(d)
		i += 2
	}
	return b.String(), true
}

// unhex decodes two upper-case hex digits, as write writes them.
func unhex(hi, lo byte) (byte, bool) {
	h, ok1 := hexDigit(hi)
	l, ok2 := hexDigit(lo)
	return h<<4 | l, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
