// Command herald is the single binary of herald: the controller, the
// speaker, the proxy and the user's tools are its subcommands (package
// internal/cli).
package main

import (
	"os"

	"github.com/herald-lb/herald/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
