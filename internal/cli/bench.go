package cli

import "github.com/spf13/cobra"

// newBench is the benchmark command.
func newBench() *cobra.Command { return &cobra.Command{Use: "bench", Hidden: true} }
