package fencecolumn

import (
	"errors"
	"fmt"
	"strings"
)

// checkPredicate reports whether sql, the text of a caller's WHERE
// predicate, is one unit that parentheses around it keep together: its
// parentheses balance outside string literals, quoted identifiers,
// dollar-quoted strings and comments, every one of those is closed, and it
// has no ';' outside them. Without the check, "id = ?) OR (true" would
// close the parentheses Update puts around it and reach past the fence.
//
// It reads sql as PostgreSQL does with standard_conforming_strings on (the
// default since 9.1): a backslash escapes only in E'…' strings.
func checkPredicate(sql string) error {
	depth := 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth == 0 {
				return fmt.Errorf("unbalanced ')' at byte %d", i)
			}
			depth--
			i++
		case c == ';':
			return fmt.Errorf("';' at byte %d: a predicate is one expression", i)
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !identChar(sql[i-2]))
			end, err := skipString(sql, i, escapes)
			if err != nil {
				return err
			}
			i = end
		case c == '"':
			end, err := skipIdentifier(sql, i)
			if err != nil {
				return err
			}
			i = end
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			end := strings.IndexAny(sql[i:], "\n\r")
			if end < 0 {
				i = len(sql)
			} else {
				i += end + 1
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end, err := skipComment(sql, i)
			if err != nil {
				return err
			}
			i = end
		case c == '$' && (i == 0 || !identChar(sql[i-1])):
			end, err := skipDollar(sql, i)
			if err != nil {
				return err
			}
			i = end
		default:
			i++
		}
	}
	if depth != 0 {
		return errors.New("unbalanced '('")
	}
	return nil
}

// identChar reports whether c can continue an identifier or a number, so
// that a quote or a '$' after it starts no string.
func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// skipString returns the index after the string literal that starts with
// the quote at i; ” is a quote inside, and so is \' if escapes.
func skipString(sql string, i int, escapes bool) (int, error) {
	for j := i + 1; j < len(sql); j++ {
		switch {
		case escapes && sql[j] == '\\':
			j++
		case sql[j] == '\'' && j+1 < len(sql) && sql[j+1] == '\'':
			j++
		case sql[j] == '\'':
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at byte %d", i)
}

// skipIdentifier returns the index after the quoted identifier that
// starts with the double quote at i; "" is a double quote inside.
func skipIdentifier(sql string, i int) (int, error) {
	for j := i + 1; ; {
		k := strings.IndexByte(sql[j:], '"')
		if k < 0 {
			return 0, fmt.Errorf("unterminated quoted identifier at byte %d", i)
		}
		j += k + 1
		if j < len(sql) && sql[j] == '"' {
			j++
			continue
		}
		return j, nil
	}
}

// skipComment returns the index after the block comment that starts at i;
// block comments nest.
func skipComment(sql string, i int) (int, error) {
	depth := 0
	for j := i; j+1 < len(sql); {
		switch {
		case sql[j] == '/' && sql[j+1] == '*':
			depth++
			j += 2
		case sql[j] == '*' && sql[j+1] == '/':
			depth--
			j += 2
			if depth == 0 {
				return j, nil
			}
		default:
			j++
		}
	}
	return 0, fmt.Errorf("unterminated comment at byte %d", i)
}

// skipDollar returns the index after the dollar-quoted string that starts
// at i ($tag$…$tag$, the tag empty or an identifier not starting with a
// digit), or i+1 if the '$' starts none (a parameter such as $1).
func skipDollar(sql string, i int) (int, error) {
	j := i + 1
	for j < len(sql) && sql[j] != '$' {
		c := sql[j]
		if !identChar(c) || c == '$' || j == i+1 && c >= '0' && c <= '9' {
			return i + 1, nil
		}
		j++
	}
	if j >= len(sql) {
		return i + 1, nil
	}
	tag := sql[i : j+1]
	end := strings.Index(sql[j+1:], tag)
	if end < 0 {
		return 0, fmt.Errorf("unterminated dollar-quoted string at byte %d", i)
	}
	return j + 1 + end + len(tag), nil
}
