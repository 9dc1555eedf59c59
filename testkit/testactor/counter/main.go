// Command counter runs the counter actor (internal/counter) as a static
// binary, for test sandboxes whose root filesystem holds nothing else.
package main

import (
	"fmt"
	"os"

	"github.com/stasis-run/stasis/internal/counter"
)

func main() {
	if err := counter.Run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(2)
	}
}
