// Command herald is the single binary of herald: the controller, the
// speaker, the proxy and the user's tools are its subcommands (package
// cmd/herald/cli).
package main

import (
	"os"

	"github.com/herald-lb/herald/cmd/herald/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
