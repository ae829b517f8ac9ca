package cli

import "github.com/spf13/cobra"

// newMigrate and newDLQ are the operations commands on a store.
func newMigrate() *cobra.Command { return &cobra.Command{Use: "migrate", Hidden: true} }
func newDLQ() *cobra.Command     { return &cobra.Command{Use: "dlq", Hidden: true} }
