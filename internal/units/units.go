// Package units formats quantities for people.
package units

import "fmt"

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
