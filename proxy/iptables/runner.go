// Package iptables is the proxy's only way to touch the kernel's packet
// filter: bulk rule loads through iptables-restore and the few single-rule
// housekeeping steps (base chains, jumps from the built-in chains) through
// go-iptables. Everything above it works against Runner, so tests use the
// Fake.
package iptables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	goipt "github.com/coreos/go-iptables/iptables"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// Family selects iptables or ip6tables (internal/ipfamily).
type Family = ipfamily.Family

// Families.
const (
	IPv4 = ipfamily.IPv4
	IPv6 = ipfamily.IPv6
)

// Runner is what the proxy needs from iptables.
type Runner interface {
	// Restore loads data (iptables-restore input) with --noflush: only
	// the chains named in data are replaced, everything else is kept.
	Restore(ctx context.Context, data []byte) error
	// Save returns iptables-save output of one table.
	Save(ctx context.Context, table string) ([]byte, error)
	ChainExists(table, chain string) (bool, error)
	EnsureChain(table, chain string) error
	// EnsureRule adds the rule at the top (prepend) or the bottom of the
	// chain unless it is already there.
	EnsureRule(prepend bool, table, chain string, rule ...string) error
	DeleteRule(table, chain string, rule ...string) error
	// DeleteChain flushes and deletes a chain; a missing chain is fine.
	DeleteChain(table, chain string) error
}

// Real runs the system's iptables (or ip6tables).
type Real struct {
	family  Family
	ipt     *goipt.IPTables
	restore string
	save    string
}

// New finds the plain tools of the family (ModeSystem).
func New(family Family) (*Real, error) { return NewFor(family, ModeSystem) }

// NewFor finds the tools of the family in one mode (backend.go).
func NewFor(family Family, mode Mode) (*Real, error) {
	t := ToolsFor(family, mode)
	proto := goipt.ProtocolIPv4
	if family == IPv6 {
		proto = goipt.ProtocolIPv6
	}
	ipt, err := goipt.New(goipt.IPFamily(proto), goipt.Timeout(5), goipt.Path(t.IPTables))
	if err != nil {
		return nil, fmt.Errorf("%s (IPv%d): %w", t.IPTables, family, err)
	}
	return &Real{family: family, ipt: ipt, restore: t.Restore, save: t.Save}, nil
}

// Restore implements Runner. -w waits for the xtables lock held by
// other users of iptables on the node instead of failing.
func (r *Real) Restore(ctx context.Context, data []byte) error {
	cmd := exec.CommandContext(ctx, r.restore, "-w", "5", "--noflush", "--counters")
	cmd.Stdin = bytes.NewReader(data)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", r.restore, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Save implements Runner.
func (r *Real) Save(ctx context.Context, table string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, r.save, "-t", table).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s: %w", r.save, table, err)
	}
	return out, nil
}

// ChainExists implements Runner.
func (r *Real) ChainExists(table, chain string) (bool, error) {
	return r.ipt.ChainExists(table, chain)
}

// EnsureChain implements Runner.
func (r *Real) EnsureChain(table, chain string) error {
	ok, err := r.ipt.ChainExists(table, chain)
	if err != nil || ok {
		return err
	}
	return r.ipt.NewChain(table, chain)
}

// EnsureRule implements Runner.
func (r *Real) EnsureRule(prepend bool, table, chain string, rule ...string) error {
	if prepend {
		return r.ipt.InsertUnique(table, chain, 1, rule...)
	}
	return r.ipt.AppendUnique(table, chain, rule...)
}

// DeleteRule implements Runner.
func (r *Real) DeleteRule(table, chain string, rule ...string) error {
	return r.ipt.DeleteIfExists(table, chain, rule...)
}

// DeleteChain implements Runner.
func (r *Real) DeleteChain(table, chain string) error {
	ok, err := r.ipt.ChainExists(table, chain)
	if err != nil || !ok {
		return err
	}
	return r.ipt.ClearAndDeleteChain(table, chain)
}
