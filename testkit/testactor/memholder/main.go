// Command memholder is the counter actor with ballast: before it serves, it
// fills memory the way a model server's does, so that its checkpoint image
// has a realistic size and mix. "memholder TEMPLATE_MIB OWN_MIB ZERO_MIB SEED"
// holds TEMPLATE_MIB of bytes that are the same in every memholder (the
// template's weights), OWN_MIB of its own (from SEED) and ZERO_MIB of touched
// zero pages, then serves the counter protocol (internal/counter).
// "memholder await get" and the other counter commands ask it, as the
// counter binary does.
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/stasis-run/stasis/internal/counter"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "await" || os.Args[1] == "get" || os.Args[1] == "incr") {
		if err := counter.Run(os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "memholder:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: memholder TEMPLATE_MIB OWN_MIB ZERO_MIB SEED")
		os.Exit(2)
	}
	var n [4]uint64
	for i := range n {
		v, err := strconv.ParseUint(os.Args[i+1], 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "memholder:", err)
			os.Exit(2)
		}
		n[i] = v
	}
	ballast := [][]byte{fill(n[0]<<20, 1), fill(n[1]<<20, n[3]+2), make([]byte, n[2]<<20)}
	for i := 0; i < len(ballast[2]); i += 4096 {
		ballast[2][i] = 0 // touch every page, so it is resident and saved
	}
	err := counter.Run([]string{"serve"}, os.Stdout)
	fmt.Fprintln(os.Stderr, "memholder:", err, len(ballast))
	os.Exit(1)
}

func fill(size, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15))
	b := make([]byte, size)
	for i := uint64(0); i+8 <= size; i += 8 {
		v := r.Uint64()
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	return b
}
