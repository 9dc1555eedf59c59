package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// doubleDash rewrites the single-dash spellings of long flags that older
// stasisd took (-data DIR, -data=DIR) to pflag's double dash, leaving
// everything else as it is.
func doubleDash(args []string, fs *pflag.FlagSet) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && fs.Lookup(name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// applyConfig sets the flags a config file names, one "name = value" per
// line ("name" alone for a true boolean; # starts a comment), unless the
// command line set them already. A flag that takes several values gets
// every line that names it.
func applyConfig(fs *pflag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	given := map[string]bool{}
	fs.Visit(func(fl *pflag.Flag) { given[fl.Name] = true })
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, hasValue := strings.Cut(line, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		fl := fs.Lookup(name)
		if fl == nil || name == "config" {
			return fmt.Errorf("%s:%d: %q is not a stasisd setting (see stasisd --help)", path, n, name)
		}
		if !hasValue {
			if fl.Value.Type() != "bool" {
				return fmt.Errorf("%s:%d: %s needs a value (%s = VALUE)", path, n, name, name)
			}
			value = "true"
		}
		if given[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, n, name, err)
		}
	}
	return sc.Err()
}
