// Command driftguard runs one driftguard component, or all of them with
// `driftguard dev`. See `driftguard help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/driftguard/driftguard/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
