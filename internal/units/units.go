// Package units formats quantities for people.
package units

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/stasis-run/stasis/errdefs"
)

// Bytes writes n with a binary unit: "512 B", "1.5 GiB".
func Bytes[T int64 | uint64](n T) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := T(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ParseBytes reads a size such as "141GiB", "512 MiB", "8G" (binary units
// either way) or a plain number of bytes. What it cannot read is an
// invalid argument (errdefs), whoever gave it.
func ParseBytes(s string) (uint64, error) {
	n, err := parseBytes(s)
	if err != nil {
		return 0, errdefs.Mark(err, errdefs.ErrInvalidArgument)
	}
	return n, nil
}

func parseBytes(s string) (uint64, error) {
	text := strings.TrimSpace(s)
	i := strings.IndexFunc(text, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	number, unit := text, ""
	if i >= 0 {
		number, unit = text[:i], strings.TrimSpace(text[i:])
	}
	value, err := strconv.ParseFloat(number, 64)
	if err != nil || value < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit, such as 8GiB", s)
	}
	shift, ok := map[string]uint{"": 0, "B": 0, "K": 10, "KiB": 10, "M": 20, "MiB": 20, "G": 30, "GiB": 30, "T": 40, "TiB": 40}[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KiB, MiB, GiB or TiB)", s, unit)
	}
	bytes := value * float64(uint64(1)<<shift)
	if bytes >= 1<<63 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return uint64(bytes), nil
}
