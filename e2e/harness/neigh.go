package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// MACChange is a moment the namespace's neighbor entry for an address
// took another link-layer address: under L2 announcement, another node
// answering for it.
type MACChange struct {
	At  time.Time
	MAC string // "" when the entry is gone or unresolved
}

// WatchMAC samples ns's neighbor entry for ip every 50 ms until the
// returned stop is called, which returns each change of its MAC (the
// first sample included). The probe's own requests keep the entry
// fresh, so a change is the address moving, not the entry ageing.
func WatchMAC(ns, ip string) (stop func() []MACChange) {
	var (
		mu      sync.Mutex
		changes []MACChange
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := "-"
		for {
			if mac := neighMAC(ns, ip); mac != last && mac != "" {
				mu.Lock()
				changes = append(changes, MACChange{At: time.Now(), MAC: mac})
				mu.Unlock()
				last = mac
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() []MACChange {
		once.Do(func() { close(done) })
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return changes
	}
}

// neighMAC is the lladdr of ns's neighbor entry for ip, or "".
func neighMAC(ns, ip string) string {
	mac, _ := Neighbor(ns, ip)
	return mac
}

// Neighbor is ns's neighbor entry for ip: its link-layer address,
// lower-case ("" when there is none or it is unresolved), and its state
// (REACHABLE, STALE, ...; on a failure to read it, why).
func Neighbor(ns, ip string) (mac, state string) {
	// Bounded: one such ip once hung for 15 minutes under load, and a
	// probe that waits on it waits forever.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "-j", "-n", ns, "neigh", "show", ip).CombinedOutput()
	if err != nil {
		return "", fmt.Sprintf("ip neigh: %v: %s", err, strings.TrimSpace(string(out)))
	}
	var entries []struct {
		LLAddr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	if err := json.Unmarshal(out, &entries); err != nil {
		return "", fmt.Sprintf("ip neigh: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if len(entries) == 0 {
		return "", "none"
	}
	return strings.ToLower(entries[0].LLAddr), strings.Join(entries[0].State, ",")
}

// LinkMAC is the MAC of a link in a namespace, or "".
func LinkMAC(ns, link string) string {
	return ipField("link/ether", "-n", ns, "-o", "link", "show", link)
}

// ipField runs ip with args and returns the word after key in its
// output, or "".
func ipField(key string, args ...string) string {
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		return ""
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == key {
			return f[i+1]
		}
	}
	return ""
}
