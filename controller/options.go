package controller

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/listen"
	"github.com/herald-lb/herald/internal/logging"
)

// Options configure `herald controller`.
type Options struct {
	// APIFlags are --kubeconfig, --kube-api-qps and --kube-api-burst.
	daemon.APIFlags
	// LogFormat is --log-format: text or json.
	LogFormat logging.Format
	// Namespace is where herald reads its configuration from.
	Namespace string
	// LBClass is the spec.loadBalancerClass handled; empty: only Services
	// without a class.
	LBClass string
	// MetricsAddr serves /metrics, /healthz and /readyz.
	MetricsAddr string
	// Workers reconcile Services in parallel.
	Workers int
	// StatusInterval is the least time between two status writes of one
	// herald.io object.
	StatusInterval time.Duration

	LeaderElect   bool
	LeaseName     string
	LeaseNS       string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Identity names this replica in the Lease.
	Identity string
}

// DefaultOptions are the flag defaults. POD_NAMESPACE and POD_NAME (from
// the downward API) fill the namespace and the identity.
func DefaultOptions() Options {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "herald-system"
	}
	return Options{
		Namespace:      ns,
		MetricsAddr:    ":7472",
		Workers:        4,
		APIFlags:       daemon.APIFlags{QPS: 200, Burst: 400},
		StatusInterval: time.Second,
		LeaderElect:    true,
		LeaseName:      "herald-controller",
		LeaseDuration:  15 * time.Second,
		RenewDeadline:  10 * time.Second,
		RetryPeriod:    2 * time.Second,
		Identity:       os.Getenv("POD_NAME"),
	}
}

// ParseFlags reads the command line of `herald controller` (flags only).
// Errors name the flag; -h returns pflag.ErrHelp.
func ParseFlags(args []string, out io.Writer) (Options, error) {
	o := DefaultOptions()
	err := flagusage.ParseFlags("controller", args, out, func(fs *pflag.FlagSet) func() error { return Flags(fs, &o) })
	return o, err
}

// Flags defines the flags of `herald controller` on fs, into o (whose
// values are the defaults). finish, called once fs is parsed, fills in
// what the flags left to be derived and checks the options.
func Flags(fs *pflag.FlagSet, o *Options) (finish func() error) {
	o.APIFlags.Register(fs)
	logging.Register(fs, &o.LogFormat)
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of herald's configuration (default: $POD_NAMESPACE or herald-system)")
	fs.StringVar(&o.LBClass, "lb-class", o.LBClass, "handle only Services with this spec.loadBalancerClass (default: only Services without a class)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "address serving /metrics, /healthz and /readyz")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Services reconciled in parallel")
	fs.DurationVar(&o.StatusInterval, "status-interval", o.StatusInterval, "least time between two status writes of one herald.io object")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader with a Lease so only one replica allocates")
	fs.StringVar(&o.LeaseName, "leader-elect-lease-name", o.LeaseName, "name of the Lease")
	fs.StringVar(&o.LeaseNS, "leader-elect-lease-namespace", o.LeaseNS, "namespace of the Lease (default: --namespace)")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "how long a standby waits after the last renewal before taking over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader keeps trying to renew before it gives up")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "wait between attempts to acquire or renew")
	fs.StringVar(&o.Identity, "leader-elect-identity", o.Identity, "this replica's name in the Lease (default: $POD_NAME, else host name and a random suffix)")
	return func() error {
		if o.LeaseNS == "" {
			o.LeaseNS = o.Namespace
		}
		if o.Identity == "" {
			o.Identity = randomIdentity()
		}
		return o.Validate()
	}
}

// randomIdentity is for a replica outside a pod: a restarted process must
// not pass for its predecessor, which may still be running.
func randomIdentity() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	for _, m := range validation.IsDNS1123Label(o.Namespace) {
		bad("namespace", "%q is not a namespace name: %s", o.Namespace, m)
	}
	if o.LBClass != "" {
		for _, m := range validation.IsQualifiedName(o.LBClass) {
			bad("lb-class", "%q is not a valid loadBalancerClass: %s", o.LBClass, m)
		}
	}
	if err := listen.Check(o.MetricsAddr); err != nil {
		bad("metrics-addr", "%v", err)
	}
	if o.Workers < 1 || o.Workers > 64 {
		bad("workers", "%d is out of range: must be between 1 and 64", o.Workers)
	}
	errs = append(errs, o.APIFlags.Validate()...)
	if o.StatusInterval < 0 {
		bad("status-interval", "must not be negative, got %s", o.StatusInterval)
	}
	if o.LeaderElect {
		for _, m := range validation.IsDNS1123Subdomain(o.LeaseName) {
			bad("leader-elect-lease-name", "%q is not a valid Lease name: %s", o.LeaseName, m)
		}
		for _, m := range validation.IsDNS1123Label(o.LeaseNS) {
			bad("leader-elect-lease-namespace", "%q is not a namespace name: %s", o.LeaseNS, m)
		}
		if o.Identity == "" {
			bad("leader-elect-identity", "must not be empty")
		}
		// client-go's own rules, checked here so the message names the flags.
		switch {
		case o.RetryPeriod <= 0:
			bad("leader-elect-retry-period", "must be positive, got %s", o.RetryPeriod)
		case o.RenewDeadline <= time.Duration(1.2*float64(o.RetryPeriod)):
			bad("leader-elect-renew-deadline", "%s must be longer than 1.2 x --leader-elect-retry-period (%s)", o.RenewDeadline, o.RetryPeriod)
		case o.LeaseDuration <= o.RenewDeadline:
			bad("leader-elect-lease-duration", "%s must be longer than --leader-elect-renew-deadline (%s)", o.LeaseDuration, o.RenewDeadline)
		}
	}
	return errors.Join(errs...)
}
