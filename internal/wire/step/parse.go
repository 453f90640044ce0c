package step

import (
	"fmt"
	"strings"
)

// ParseTags reads key=value pairs separated by commas or new lines.
func ParseTags(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		k, v, ok := strings.Cut(f, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("tags: %q: want key=value pairs separated by commas or new lines", f)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// ParseList reads a list input (allowed-instance-types, labels, pools): items separated by
// commas, spaces, tabs or new lines.
func ParseList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
}
