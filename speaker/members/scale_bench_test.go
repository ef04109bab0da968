package members

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

const (
	mlsChildEnv  = "HERALD_MLSCALE_CHILD"
	mlsPort      = 17946
	mlsProcesses = 10
	// mlsStopped and mlsRun are the starved process's duty cycle.
	mlsStopped, mlsRun = 80 * time.Millisecond, 20 * time.Millisecond
)

// mlsTimers are the profiles compared: herald's defaults and
// memberlist's DefaultLANConfig, which MetalLB runs; "fast" is herald's
// with the shortest suspicion, to show what the suspicion buys.
//
// "PROFILE*K" runs a profile with every timer K times longer (time
// dilation): the protocol does the same per period, K times slower, so
// a cluster too big for this machine's CPU at full speed fits, and the
// report scales its figures back (times divided by K, bytes/s and CPU
// multiplied by K). Loopback's latency is far below every timer either
// way; what dilation leaves out is CPU contention at full speed.
func mlsTimers(profile string) (Timers, int, bool) {
	name, factor, dilated := strings.Cut(profile, "*")
	k := 1
	if dilated {
		n, err := strconv.Atoi(factor)
		if err != nil || n < 1 || n > 100 {
			return Timers{}, 0, false
		}
		k = n
	}
	t, ok := mlsBaseTimers(name)
	if !ok {
		return Timers{}, 0, false
	}
	t = t.withDefaults()
	for _, d := range []*time.Duration{&t.ProbeInterval, &t.ProbeTimeout, &t.GossipInterval, &t.PushPullInterval,
		&t.GossipToTheDeadTime, &t.TCPTimeout, &t.DeadNodeReclaimTime} {
		*d *= time.Duration(k)
	}
	return t, k, true
}

func mlsBaseTimers(profile string) (Timers, bool) {
	switch profile {
	case "herald":
		return DefaultTimers(), true
	case "fast":
		// herald's with the shortest suspicion memberlist allows
		// (multiplier 1: no confirmation, 1 x log10(N) probe intervals):
		// what detection would gain, and what it would cost in false deaths.
		t := DefaultTimers()
		t.SuspicionMult = 1
		return t, true
	case "lan":
		return Timers{
			ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond, IndirectChecks: 3,
			SuspicionMult: 4, SuspicionMaxTimeoutMult: 6, GossipInterval: 200 * time.Millisecond, GossipNodes: 3,
			RetransmitMult: 4, PushPullInterval: 30 * time.Second, GossipToTheDeadTime: 30 * time.Second,
			TCPTimeout: 10 * time.Second, DeadNodeReclaimTime: 10 * time.Second,
		}, true
	}
	return Timers{}, false
}

// mlsAddr is member i's loopback address: 127.0.0.0/8 is local on lo,
// so every member gets its own address on one port.
func mlsAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 77, byte(1 + i/200), byte(1 + i%200)})
}

func mlsName(i int) string { return fmt.Sprintf("m%04d", i) }

// countingTransport counts the bytes a member writes, UDP and TCP.
type countingTransport struct {
	memberlist.Transport
	sent *atomic.Int64
}

func (c countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	c.sent.Add(int64(len(b)))
	return c.Transport.WriteTo(b, addr)
}

func (c countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := c.Transport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return countingConn{conn, c.sent}, nil
}

type countingConn struct {
	net.Conn
	sent *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(int64(n))
	return n, err
}

// TestMemberlistScaleChild is one process of the benchmark's cluster:
// it starts members [MLS_FROM, MLS_TO), joins them to MLS_SEEDS, prints
// "ready", then answers commands on stdin (arm, count, bytes, kill NAME,
// quit) and prints "dead TIME OBSERVER SUBJECT" for every member one of
// its members declares dead once armed.
func TestMemberlistScaleChild(t *testing.T) {
	if os.Getenv(mlsChildEnv) != "1" {
		t.Skip("a process of TestBenchMemberlistScale's cluster, started by it")
	}
	from, _ := strconv.Atoi(os.Getenv("MLS_FROM"))
	to, _ := strconv.Atoi(os.Getenv("MLS_TO"))
	timers, _, ok := mlsTimers(os.Getenv("MLS_PROFILE"))
	if !ok || to <= from {
		fmt.Printf("fatal bad MLS_FROM/MLS_TO/MLS_PROFILE\n")
		os.Exit(2)
	}
	seeds := strings.Split(os.Getenv("MLS_SEEDS"), ",")

	out := make(chan string, 1<<16)
	go func() {
		w := bufio.NewWriter(os.Stdout)
		for l := range out {
			w.WriteString(l + "\n")
			if len(out) == 0 {
				w.Flush()
			}
		}
	}()
	var armed atomic.Bool
	type member struct {
		name string
		m    *Memberlist
		sent *atomic.Int64
		last int64
	}
	var ms []*member
	for i := from; i < to; i++ {
		mem := &member{name: mlsName(i), sent: &atomic.Int64{}}
		m, err := New(Config{
			NodeName: mem.name, BindAddr: mlsAddr(i), AdvertiseAddr: mlsAddr(i), BindPort: mlsPort,
			Secret: Secret("herald memberlist scale benchmark"), Meta: Meta{Interfaces: []string{"eth0"}},
			Timers: timers,
			OnEvent: func(e Event) {
				if e.Type == EventLeave && armed.Load() {
					out <- fmt.Sprintf("dead %d %s %s", time.Now().UnixNano(), mem.name, e.Member.Name)
				}
			},
			wrapTransport: func(tr memberlist.Transport) memberlist.Transport { return countingTransport{tr, mem.sent} },
		})
		if err != nil {
			out <- "fatal " + err.Error()
			time.Sleep(time.Second)
			os.Exit(2)
		}
		mem.m = m
		ms = append(ms, mem)
	}
	// Each member joins one seed (round-robin): a join is a full state
	// exchange, and a thousand of them on three seeds at once starve the
	// seeds' process.
	for i, mem := range ms {
		var peers []string
		if s := seeds[(from+i)%len(seeds)]; s != "" && s != mem.m.LocalAddr().String() {
			peers = append(peers, s)
		} else if s := seeds[(from+i+1)%len(seeds)]; s != "" && s != mem.m.LocalAddr().String() {
			peers = append(peers, s)
		}
		if len(peers) > 0 {
			if _, err := mem.m.Join(peers); err != nil {
				out <- "log join " + mem.name + ": " + err.Error()
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	out <- "ready"

	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "arm":
			armed.Store(true)
			out <- "armed"
		case "count":
			lo, hi := math.MaxInt, 0
			for _, mem := range ms {
				if mem.m.closed.Load() {
					continue
				}
				n := len(mem.m.Members())
				lo, hi = min(lo, n), max(hi, n)
			}
			out <- fmt.Sprintf("count %d %d", lo, hi)
		case "bytes":
			// The bytes each live member sent since the last "bytes".
			var sum, most int64
			for _, mem := range ms {
				now := mem.sent.Load()
				d := now - mem.last
				mem.last = now
				if mem.m.closed.Load() {
					continue
				}
				sum += d
				most = max(most, d)
			}
			out <- fmt.Sprintf("bytes %d %d", sum, most)
		case "kill":
			for _, mem := range ms {
				if len(f) > 1 && mem.name == f[1] {
					at := time.Now().UnixNano()
					mem.m.kill()
					out <- fmt.Sprintf("killed %d %s", at, mem.name)
				}
			}
		case "quit":
			os.Exit(0)
		}
	}
	os.Exit(0)
}

// mlsChild is the benchmark's handle on one child process.
type mlsChild struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	from    int
	to      int
	replies chan string
}

func (c *mlsChild) send(t *testing.T, line string) {
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		t.Fatalf("child %d-%d: %v", c.from, c.to, err)
	}
}

// ask sends a command and waits for its reply, a line starting with
// the reply's word.
func (c *mlsChild) ask(t *testing.T, line, word string, timeout time.Duration) string {
	r, ok := c.tryAsk(t, line, word, timeout)
	if !ok {
		t.Fatalf("child %d-%d: no %q reply to %q in %s", c.from, c.to, word, line, timeout)
	}
	return r
}

// tryAsk is ask that gives up after timeout (a late reply is skipped
// by the next ask, which waits for its own word).
func (c *mlsChild) tryAsk(t *testing.T, line, word string, timeout time.Duration) (string, bool) {
	c.send(t, line)
	deadline := time.After(timeout)
	for {
		select {
		case r := <-c.replies:
			if strings.HasPrefix(r, word) {
				return r, true
			}
		case <-deadline:
			return "", false
		}
	}
}

// cpuTicks is utime+stime of a process in clock ticks (1/100 s).
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

type mlsDeath struct {
	at                time.Time
	observer, subject string
}

// mlsCluster is one running cluster of child processes.
type mlsCluster struct {
	t        *testing.T
	n        int
	children []*mlsChild
	deaths   chan mlsDeath
}

func startMLSCluster(t *testing.T, profile string, n int) *mlsCluster {
	c := &mlsCluster{t: t, n: n, deaths: make(chan mlsDeath, 1<<20)}
	procs := min(mlsProcesses, n)
	seeds := []string{}
	for i := range min(3, n/procs) { // in the first process, started alone
		seeds = append(seeds, netip.AddrPortFrom(mlsAddr(i), mlsPort).String())
	}
	start := func(p int) *mlsChild {
		ch := &mlsChild{from: p * n / procs, to: (p + 1) * n / procs, replies: make(chan string, 64)}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestMemberlistScaleChild$", "-test.count=1", "-test.timeout=0")
		cmd.Env = append(os.Environ(), mlsChildEnv+"=1", "MLS_PROFILE="+profile,
			fmt.Sprintf("MLS_FROM=%d", ch.from), fmt.Sprintf("MLS_TO=%d", ch.to), "MLS_SEEDS="+strings.Join(seeds, ","))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		outp, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ch.cmd, ch.in = cmd, in
		go func() {
			sc := bufio.NewScanner(outp)
			for sc.Scan() {
				l := sc.Text()
				f := strings.Fields(l)
				switch {
				case len(f) == 4 && f[0] == "dead":
					ns, _ := strconv.ParseInt(f[1], 10, 64)
					c.deaths <- mlsDeath{time.Unix(0, ns), f[2], f[3]}
				case len(f) > 0 && (f[0] == "log" || f[0] == "fatal"):
					t.Logf("child %d-%d: %s", ch.from, ch.to, l)
				default:
					ch.replies <- l
				}
			}
		}()
		return ch
	}
	t.Cleanup(func() {
		for _, ch := range c.children {
			_ = ch.cmd.Process.Signal(syscall.SIGCONT)
			_ = ch.cmd.Process.Kill()
			_ = ch.cmd.Wait()
		}
	})
	// One process at a time, the seeds' first.
	for p := range procs {
		ch := start(p)
		c.children = append(c.children, ch)
		ch.wait(t, "ready", 5*time.Minute)
	}
	return c
}

func (ch *mlsChild) wait(t *testing.T, word string, timeout time.Duration) {
	deadline := time.After(timeout)
	for {
		select {
		case r := <-ch.replies:
			if r == word {
				return
			}
		case <-deadline:
			t.Fatalf("child %d-%d: not %s after %s", ch.from, ch.to, word, timeout)
		}
	}
}

// converge waits until every live member sees want members. When it
// gives up it logs the fewest and most members each process's members
// see, which tells a slow spread from members declared dead at start.
func (c *mlsCluster) converge(want int, timeout time.Duration) (time.Duration, bool) {
	begin := time.Now()
	var seen []string
	for time.Since(begin) < timeout {
		ok := true
		seen = seen[:0]
		for _, ch := range c.children {
			r, replied := ch.tryAsk(c.t, "count", "count", time.Minute)
			if !replied {
				c.t.Logf("child %d-%d: no answer to count in a minute (starved?)", ch.from, ch.to)
				ok = false
				continue
			}
			f := strings.Fields(r)
			lo, _ := strconv.Atoi(f[1])
			hi, _ := strconv.Atoi(f[2])
			if lo == math.MaxInt && hi == 0 {
				continue // every member of this process was killed
			}
			ok = ok && lo == want && hi == want
			seen = append(seen, fmt.Sprintf("%d-%d:%d..%d", ch.from, ch.to, lo, hi))
		}
		if ok {
			return time.Since(begin), true
		}
		time.Sleep(time.Second)
	}
	c.t.Logf("not converged: members seen per process (first-last member: fewest..most) %s", strings.Join(seen, " "))
	return time.Since(begin), false
}

// bytesSince returns the bytes the live members sent since the last
// call: in all, and the most one member sent.
func (c *mlsCluster) bytesSince() (sum, most int64) {
	for _, ch := range c.children {
		f := strings.Fields(ch.ask(c.t, "bytes", "bytes", time.Minute))
		s, _ := strconv.ParseInt(f[1], 10, 64)
		m, _ := strconv.ParseInt(f[2], 10, 64)
		sum += s
		most = max(most, m)
	}
	return sum, most
}

func (c *mlsCluster) cpu() int64 {
	var sum int64
	for _, ch := range c.children {
		sum += cpuTicks(ch.cmd.Process.Pid)
	}
	return sum
}

// drain returns the deaths reported until now.
func (c *mlsCluster) drain() []mlsDeath {
	var out []mlsDeath
	for {
		select {
		case d := <-c.deaths:
			out = append(out, d)
		default:
			return out
		}
	}
}

// mlsRow is one line of the report.
type mlsRow struct {
	profile             string
	n                   int
	dilation            int // timers this many times longer; the report scales back
	converge            time.Duration
	converged           bool
	quiet               time.Duration
	quietDeaths         int     // verdicts
	quietDead           int     // members they were about
	bytesMean, bytesMax float64 // per member per second
	cores               float64 // CPU of the whole cluster in the quiet run
	detect              []time.Duration
	undetected          int
	kills               int
	killDeaths          int // deaths of members not killed during the kills
	starved             time.Duration
	starvedDeaths       int // verdicts on starved members
	starvedOthers       int // verdicts on the others
	starvedObservers    int // verdicts given by starved members
	starvedDead         int // members the verdicts were about
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", key, v)
	}
	return d
}

// TestBenchMemberlistScale measures memberlist as herald configures it
// at 10, 100 and 1,000 members on loopback (issue #19, item 1), next to
// memberlist's LAN defaults (MetalLB's): failure detection at every
// survivor, false deaths in a quiet run and with 10 % of the members
// CPU-starved, bytes sent per member and the CPU the whole cluster
// burns. The members run in 10 child processes (this test binary, run
// again as TestMemberlistScaleChild), so one process can be starved:
// it is stopped 80 ms of every 100 ms with SIGSTOP/SIGCONT, as a CFS
// quota of 20 ms per 100 ms period throttles a pod over its CPU limit.
//
// It prints figures and asserts nothing. It needs the machine to itself
// (a lab run or a build next to it starves every member):
//
//	HERALD_BENCH=1 go test -count=1 -run '^TestBenchMemberlistScale$' -v -timeout 180m ./speaker/members/
//
// HERALD_MLS_N (default 10,100,1000), HERALD_MLS_PROFILES (herald,lan;
// also fast), HERALD_MLS_QUIET and HERALD_MLS_STARVED (5m each) and
// HERALD_MLS_KILLS (5) size it.
func TestBenchMemberlistScale(t *testing.T) {
	if os.Getenv("HERALD_BENCH") != "1" {
		t.Skip("a benchmark, run by `make bench` (HERALD_BENCH=1), not by make test")
	}
	var sizes []int
	for _, s := range strings.Split(cmp.Or(os.Getenv("HERALD_MLS_N"), "10,100,1000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 4 || n > 2000 {
			t.Fatalf("HERALD_MLS_N: %q is not a member count from 4 to 2000", s)
		}
		sizes = append(sizes, n)
	}
	profiles := strings.Split(cmp.Or(os.Getenv("HERALD_MLS_PROFILES"), "herald,lan"), ",")
	for _, p := range profiles {
		if _, _, ok := mlsTimers(p); !ok {
			t.Fatalf("HERALD_MLS_PROFILES: unknown profile %q (herald, fast, lan, each optionally *K for K times longer timers)", p)
		}
	}
	quiet := envDuration(t, "HERALD_MLS_QUIET", 5*time.Minute)
	starved := envDuration(t, "HERALD_MLS_STARVED", 5*time.Minute)
	kills, err := strconv.Atoi(cmp.Or(os.Getenv("HERALD_MLS_KILLS"), "5"))
	if err != nil || kills < 1 {
		t.Fatalf("HERALD_MLS_KILLS: want a positive count")
	}

	var rows []mlsRow
	for _, profile := range profiles {
		for _, n := range sizes {
			var row mlsRow
			t.Run(fmt.Sprintf("%s/n=%d", profile, n), func(t *testing.T) {
				row = runMLS(t, profile, n, quiet, starved, kills)
				t.Log("\n" + mlsReport([]mlsRow{row}))
			})
			rows = append(rows, row)
		}
	}
	t.Log("\n" + mlsReport(rows))
	t.Logf("BENCH reproduce: HERALD_BENCH=1 HERALD_MLS_N=%s HERALD_MLS_PROFILES=%s HERALD_MLS_QUIET=%s HERALD_MLS_STARVED=%s HERALD_MLS_KILLS=%d go test -count=1 -run '^TestBenchMemberlistScale$' -v -timeout 180m ./speaker/members/",
		cmp.Or(os.Getenv("HERALD_MLS_N"), "10,100,1000"), strings.Join(profiles, ","), quiet, starved, kills)
}

func runMLS(t *testing.T, profile string, n int, quiet, starved time.Duration, kills int) mlsRow {
	timers, k, _ := mlsTimers(profile)
	dk := time.Duration(k)
	row := mlsRow{profile: profile, n: n, dilation: k}
	c := startMLSCluster(t, profile, n)
	row.converge, row.converged = c.converge(n, 10*time.Minute)
	if !row.converged {
		t.Logf("%s n=%d: not every member saw %d members after %s", profile, n, n, row.converge.Round(time.Second))
	}
	// Settle: the joins' gossip dies down before the quiet run counts.
	time.Sleep(max(5*time.Second*dk, 2*timers.PushPullInterval/10))
	for _, ch := range c.children {
		ch.ask(t, "arm", "armed", time.Minute)
	}

	// The quiet run: every death is false.
	c.drain()
	c.bytesSince()
	cpu0, t0 := c.cpu(), time.Now()
	time.Sleep(quiet)
	sum, most := c.bytesSince()
	row.quiet = time.Since(t0)
	row.cores = float64(c.cpu()-cpu0) / 100 / row.quiet.Seconds()
	row.bytesMean = float64(sum) / float64(n) / row.quiet.Seconds()
	row.bytesMax = float64(most) / row.quiet.Seconds()
	quietDead := map[string]bool{}
	for _, d := range c.drain() {
		row.quietDeaths++
		quietDead[d.subject] = true
	}
	row.quietDead = len(quietDead)
	t.Logf("%s n=%d: quiet run over %s: %d false death verdicts about %d members, %.0f B/s per member (max %.0f), %.2f cores", profile, n, row.quiet.Round(time.Second), row.quietDeaths, row.quietDead, row.bytesMean, row.bytesMax, row.cores)

	// Kills: one member at a time, from the processes that are not
	// starved later; each survivor's verdict time is a detection time.
	victims := map[string]bool{}
	live := n
	wait := 30 * time.Second * dk
	if strings.HasPrefix(profile, "lan") {
		wait = 90 * time.Second * dk
	}
	for k := range kills {
		ch := c.children[1+k%(len(c.children)-2)]
		idx := ch.from + (k/(len(c.children)-2))%(ch.to-ch.from)
		name := mlsName(idx)
		if victims[name] {
			continue
		}
		f := strings.Fields(ch.ask(t, "kill "+name, "killed", time.Minute))
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		at := time.Unix(0, ns)
		victims[name] = true
		live--
		row.kills++
		seen := map[string]bool{}
		deadline := time.After(wait)
	collect:
		for len(seen) < live {
			select {
			case d := <-c.deaths:
				switch {
				case d.subject == name && !seen[d.observer] && !victims[d.observer]:
					seen[d.observer] = true
					row.detect = append(row.detect, d.at.Sub(at))
				case !victims[d.subject]:
					row.killDeaths++
				}
			case <-deadline:
				break collect
			}
		}
		row.undetected += live - len(seen)
		time.Sleep(2 * time.Second)
	}
	t.Logf("%s n=%d: %d kills: detection p50 %s p99 %s max %s, %d survivors' verdicts missing", profile, n, row.kills,
		pct(row.detect, .5).Round(time.Millisecond), pct(row.detect, .99).Round(time.Millisecond), pct(row.detect, 1).Round(time.Millisecond), row.undetected)

	// Starved: the last process (10 % of the members) stopped 80 ms of
	// every 100 ms. Verdicts until it has had time to refute count.
	time.Sleep(5 * time.Second * dk)
	c.drain()
	sv := c.children[len(c.children)-1]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			_ = sv.cmd.Process.Signal(syscall.SIGSTOP)
			select {
			case <-stop:
				_ = sv.cmd.Process.Signal(syscall.SIGCONT)
				return
			case <-time.After(mlsStopped * dk):
			}
			_ = sv.cmd.Process.Signal(syscall.SIGCONT)
			select {
			case <-stop:
				return
			case <-time.After(mlsRun * dk):
			}
		}
	}()
	t1 := time.Now()
	time.Sleep(starved)
	close(stop)
	wg.Wait()
	row.starved = time.Since(t1)
	time.Sleep(2 * timers.ProbeInterval * time.Duration(timers.SuspicionMult*timers.SuspicionMaxTimeoutMult))
	inStarved := func(name string) bool {
		i, _ := strconv.Atoi(strings.TrimPrefix(name, "m"))
		return i >= sv.from && i < sv.to
	}
	starvedDead := map[string]bool{}
	for _, d := range c.drain() {
		if victims[d.subject] {
			continue
		}
		starvedDead[d.subject] = true
		if inStarved(d.subject) {
			row.starvedDeaths++
		} else {
			row.starvedOthers++
		}
		if inStarved(d.observer) {
			row.starvedObservers++
		}
	}
	row.starvedDead = len(starvedDead)
	t.Logf("%s n=%d: starved %s: %d verdicts on starved members, %d on the others (%d of all given by starved members), about %d members", profile, n, row.starved.Round(time.Second), row.starvedDeaths, row.starvedOthers, row.starvedObservers, row.starvedDead)
	return row
}

func mlsReport(rows []mlsRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "BENCH memberlist scale on loopback, encrypted, %d processes; starved = the last process stopped %s of every %s\n", mlsProcesses, mlsStopped, mlsStopped+mlsRun)
	fmt.Fprintf(&b, "  %-9s %5s %10s %10s %18s %14s %7s %28s %10s %12s %38s\n", "timers", "N", "converged", "quiet run", "false deaths", "B/s/member", "cores", "detection p50/p99/max", "missing", "kill-phase", "starved: false death verdicts")
	fmt.Fprintf(&b, "  %-9s %5s %10s %10s %18s %14s %7s %28s %10s %12s %38s\n", "", "", "", "", "verdicts (members)", "mean/max", "", "(kills x survivors)", "verdicts", "false deaths", "on starved/others (by st.) [members]")
	for _, r := range rows {
		// A dilated run's figures scaled back to full speed.
		k := float64(max(1, r.dilation))
		det := func(p float64) time.Duration {
			return time.Duration(float64(pct(r.detect, p)) / k).Round(time.Millisecond)
		}
		conv := r.converge.Round(time.Second).String()
		if !r.converged {
			conv = "NO " + conv
		}
		fmt.Fprintf(&b, "  %-9s %5d %10s %10s %18s %14s %7.2f %28s %10d %12d %38s\n", r.profile, r.n, conv, r.quiet.Round(time.Second), fmt.Sprintf("%d (%d)", r.quietDeaths, r.quietDead),
			fmt.Sprintf("%.0f/%.0f", r.bytesMean*k, r.bytesMax*k), r.cores*k,
			fmt.Sprintf("%s/%s/%s (%dx%d)", det(.5), det(.99), det(1), r.kills, r.n-r.kills),
			r.undetected, r.killDeaths, fmt.Sprintf("%d/%d (%d) [%d] in %s", r.starvedDeaths, r.starvedOthers, r.starvedObservers, r.starvedDead, r.starved.Round(time.Second)))
	}
	fmt.Fprintf(&b, "  a profile *K ran with every timer (and the starved duty cycle) K times longer: its detection times are divided by K, its bytes/s and cores multiplied by K; its run lengths are real time\n")
	fmt.Fprintf(&b, "  targets (issue #19): detection p99 <= 0.5 s at 1,000, 0 false deaths, <= 50 kB/s per member\n")
	return b.String()
}
