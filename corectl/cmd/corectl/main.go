// Command corectl is sandgate's network controller daemon: it owns each
// sandbox's egress NetworkPolicy and managed ingress-allowlist Ingress in
// its compute cluster and serves the network API (docs/corectl.md).
//
// Usage:
//
//	corectl -config clusters.yaml -credentials credentials.yaml -api-keys keys.yaml \
//	        [-listen 127.0.0.1:8090] [-leader-elect=true] [-leader-election-namespace corectl-system]
//	        [-probe-listen :8091] [-probe-pprof] [-shutdown-grace 30s]
//	corectl -version
//	corectl rbac -config clusters.yaml -credentials credentials.yaml [-cluster ID] [-service-account corectl-system/corectl]
//
// -config is the cluster configuration (package cluster), -credentials the
// resource credential file shared with the gateway (package credential,
// reloaded on change), -api-keys the API key file (package apikey);
// -probe-listen serves /healthz, /readyz and /metrics (and, with
// -probe-pprof, Go's runtime profiles under /debug/pprof/). It runs until
// SIGINT or SIGTERM, then fails /readyz, lets in-flight API requests
// finish for up to -shutdown-grace, and releases its leases. It exits 1 with
// the reason when a file is invalid or a cluster is unreachable, and 2 on
// bad flags; -h (or -help) prints the usage, the commands and the flags
// and exits 0. -version prints the sandgate commit it was built from
// (package internal/version) and exits 0. `corectl rbac` prints the
// RoleBindings corectl needs in one compute cluster's namespaces (package
// nsrights, docs/deploy.md "Compute clusters") and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/cnicheck"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/fairshare"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/entryprobe"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/internal/version"
	"go.uber.org/zap"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "corectl:", err)
		os.Exit(1)
	}
}

// usage is what -h prints before the flags.
const usage = `Usage:
  corectl -config clusters.yaml -credentials credentials.yaml -api-keys keys.yaml [flags]
      serve the E2B control API and run the network controller (docs/corectl.md)
  corectl -print-cni-facts -config clusters.yaml
      print the CNI facts of the clusters with a cniSource as qualification records
  corectl -version
      print the sandgate commit this binary was built from
  corectl rbac -config clusters.yaml -credentials credentials.yaml [-cluster ID] [-service-account ns/name]
      print the RoleBindings corectl needs in one compute cluster's namespaces, to pipe to
      kubectl apply -f - (corectl rbac -h; docs/deploy.md "Compute clusters")
Exit status: 0; 1 when a file is invalid or a cluster unreachable; 2 on bad flags.

Flags:
`

// parseFlags parses args into fs, whose usage is usage (the text before
// the flags' defaults), and says whether the command must end now, with
// which exit status: 0 after -h or -help (the usage printed), 2 after a
// bad flag (the error and the usage printed).
func parseFlags(fs *flag.FlagSet, usage string, args []string) (code int, stop bool) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	default:
		return 2, true
	}
}

// serving is called by run with the API's and the probe listener's bound
// addresses ("" without -probe-listen) once both listen and SIGTERM and
// SIGINT stop run (no longer the process), before the daemon runs. It
// does nothing; a test of run replaces it to learn the ports of "-listen
// 127.0.0.1:0", bound by run itself, so no port is picked first and bound
// later.
var serving = func(addr, probeAddr string) {}

func run(args []string) error {
	if len(args) > 0 && args[0] == "rbac" {
		return runRBAC(args[1:], os.Stdout)
	}
	fs := flag.NewFlagSet("corectl", flag.ContinueOnError)
	configPath := fs.String("config", "", "cluster configuration file (YAML or JSON)")
	credPath := fs.String("credentials", "", "resource credential file (YAML or JSON)")
	keysPath := fs.String("api-keys", "", "API key file (YAML or JSON); reloaded when it changes, a version that does not parse keeps the last good one")
	listen := fs.String("listen", "127.0.0.1:8090", "API listen address")
	elect := fs.Bool("leader-elect", true, "use leader election (required when more than one replica runs)")
	leNS := fs.String("leader-election-namespace", "corectl-system", "namespace of the leader-election Lease in every cluster")
	leaseDuration := fs.Duration("leader-election-lease-duration", daemon.DefaultLeaseDuration, "how long a Lease's holder is the leader without renewing it: a standby replica takes the Lease over this long after the leader stopped renewing (died)")
	renewDeadline := fs.Duration("leader-election-renew-deadline", daemon.DefaultRenewDeadline, "how long the leader keeps trying to renew its Lease before it stops leading; below -leader-election-lease-duration")
	retryPeriod := fs.Duration("leader-election-retry-period", daemon.DefaultRetryPeriod, "how often replicas try to acquire or renew the Lease; below -leader-election-renew-deadline")
	grace := fs.Duration("egress-grace", 2*time.Minute, "age after which an interrupted egress update is finished by the leader")
	dev := fs.Bool("dev-log", false, "human-readable logs")
	keyID := fs.String("token-key-id", "", "kid of the gateway's token signing key (enables create/connect/get/delete)")
	keyAlg := fs.String("token-key-algorithm", "HS256", "algorithm of the token signing key")
	keyFile := fs.String("token-key-file", "", "file of the token signing key (the gateway's token_key)")
	internalTokenFile := fs.String("internal-token-file", "", "file holding the bearer tokens the gateway's sandbox authorizer may present on GET /internal/v1/authorize, one per line, each at least 32 bytes (several during a rotation: any is accepted; a file of one token is the usual case; empty: that route is off)")
	maxTimeout := fs.Duration("max-timeout", time.Hour, "longest sandbox timeout a create, connect or setTimeout may ask for, and the longest a sandbox lives from its start")
	tokenGrace := fs.Duration("token-grace", 30*time.Second, "how long an envd access token outlives the latest end of its sandbox (start + -max-timeout)")
	readyBudget := fs.Duration("ready-budget", time.Minute, "how long a create waits for execd readiness through the fixed entry")
	orphanEvery := fs.Duration("orphan-interval", time.Minute, "period of the orphan scan")
	orphanGrace := fs.Duration("orphan-grace", 5*time.Minute, "age below which the orphan scan leaves an object alone (a create still Creating is taken for abandoned at this age plus -ready-budget)")
	probeListen := fs.String("probe-listen", "", "address serving /healthz, /readyz and /metrics (empty: none; the Kubernetes manifests use :8091)")
	probePprof := fs.Bool("probe-pprof", false, "also serve Go's runtime profiles (net/http/pprof) under /debug/pprof/ on -probe-listen, for measuring (hack/corectlload -heap-profile); keep that listener private when on")
	shutdownGrace := fs.Duration("shutdown-grace", daemon.DefaultShutdownGrace, "on SIGTERM, how long in-flight API requests may finish before they are cut off")
	relayURL := fs.String("probe-relay-url", "", "base URL of the gateway's fixed-entry probe relay (fixed_entry_probe on its own listener, e.g. http://gateway-probe-relay:30086, a headless Service, so that discovery reaches every gateway replica): readiness checks and probe-source discovery then leave from the gateway, so restricted sandboxes admit the data plane's source and Host (empty: corectl probes the fixed entries itself)")
	relayTokenFile := fs.String("probe-relay-token-file", "", "file holding the bearer token of the probe relay (at least 32 bytes; the gateway's fixed_entry_probe has its SHA-256); required with -probe-relay-url")
	relayWait := fs.Duration("probe-relay-wait", 2*time.Minute, "how long corectl waits at start for the probe relay to confirm the gateway's clusters match -config")
	shareRate := fs.Float64("api-share-rate", fairshare.DefaultRate, "each credential's share of its cluster's apiserver requests for its API calls: requests a second (a call of a credential whose share is spent is 429 rate_limited; negative: no shares)")
	shareBurst := fs.Int("api-share-burst", fairshare.DefaultBurst, "each credential's share of its cluster's apiserver requests: the most it holds, in requests")
	shareInProgress := fs.Int("api-share-in-progress", fairshare.DefaultInProgress, "each credential's API calls in progress at once (a call past it is 429 rate_limited)")
	showVersion := fs.Bool("version", false, "print the sandgate commit this binary was built from and exit")
	cniEvery := fs.Duration("cni-check-interval", cnicheck.DefaultInterval, "how often every replica re-reads the CNI facts of clusters with a cniSource")
	printCNI := fs.Bool("print-cni-facts", false, "read the CNI facts of every cluster with a cniSource, print them as qualification records (YAML) and exit (needs only -config)")
	if code, stop := parseFlags(fs, usage, args); stop {
		os.Exit(code)
	}
	if *showVersion {
		fmt.Println(version.Get())
		return nil
	}
	if *printCNI {
		if *configPath == "" {
			fmt.Fprintln(os.Stderr, "corectl: -print-cni-facts needs -config")
			os.Exit(2)
		}
		return printCNIFacts(*configPath, os.Stdout)
	}
	if *configPath == "" || *credPath == "" || *keysPath == "" {
		fmt.Fprintln(os.Stderr, "corectl: -config, -credentials and -api-keys are required")
		os.Exit(2)
	}
	if *shareBurst <= 0 || *shareInProgress <= 0 {
		fmt.Fprintln(os.Stderr, "corectl: -api-share-burst and -api-share-in-progress must be positive")
		os.Exit(2)
	}
	if *maxTimeout <= 0 || *tokenGrace < 0 || *cniEvery <= 0 || *orphanGrace <= 0 {
		fmt.Fprintln(os.Stderr, "corectl: -max-timeout must be positive and -token-grace not negative, -cni-check-interval and -orphan-grace positive")
		os.Exit(2)
	}
	if !(*leaseDuration > *renewDeadline && *renewDeadline > *retryPeriod && *retryPeriod > 0) {
		fmt.Fprintln(os.Stderr, "corectl: -leader-election-lease-duration must be longer than -leader-election-renew-deadline, and that longer than -leader-election-retry-period, which must be positive")
		os.Exit(2)
	}
	log := crzap.New(crzap.UseDevMode(*dev))
	ctrl.SetLogger(log)
	cfg, err := cluster.Load(*configPath)
	if err != nil {
		return err
	}
	zl, _ := zap.NewProduction()
	keys, err := apikey.OpenFile(*keysPath, zl)
	if err != nil {
		return err
	}
	defer keys.Close()
	creds, err := credential.OpenFile(*credPath, zl)
	if err != nil {
		return err
	}
	defer creds.Close()
	var signer *token.SigningKey
	if *keyFile != "" || *keyID != "" {
		k, err := token.LoadSigningKey(*keyID, *keyAlg, *keyFile)
		if err != nil {
			return err
		}
		signer = &k
	}
	var internalTokens []string
	if *internalTokenFile != "" {
		if internalTokens, err = readInternalTokens(*internalTokenFile); err != nil {
			return err
		}
	}
	var relay *entryprobe.Client
	if *relayURL != "" {
		if *relayTokenFile == "" {
			return fmt.Errorf("-probe-relay-url needs -probe-relay-token-file")
		}
		tok, err := readInternalToken(*relayTokenFile)
		if err != nil {
			return fmt.Errorf("-probe-relay-token-file: %w", err)
		}
		relay = &entryprobe.Client{URL: *relayURL, Token: tok}
	}
	d, err := daemon.New(daemon.Options{
		ProbeRelay: relay, ProbeRelayWait: *relayWait,
		InternalTokens: internalTokens, CNICheckInterval: *cniEvery,
		Config: cfg, Keys: keys, Credentials: creds, Listen: *listen,
		LeaderElection: *elect, LeaderElectionNamespace: *leNS, EgressGrace: *grace, Log: log,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod, OrphanGrace: *orphanGrace,
		ProbeSourceDiscovery: true,
		TokenKey:             signer, MaxTimeout: *maxTimeout, TokenGrace: *tokenGrace, ReadyBudget: *readyBudget, OrphanInterval: *orphanEvery,
		ProbeListen: *probeListen, Profiling: *probePprof, ShutdownGrace: *shutdownGrace,
		APIShare: fairshare.Config{Rate: *shareRate, Burst: *shareBurst, InProgress: *shareInProgress},
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("corectl serving", "addr", d.Addr(), "probeAddr", d.ProbeAddr(), "clusters", len(cfg.Clusters), "leaderElection", *elect)
	serving(d.Addr(), d.ProbeAddr())
	return d.Run(ctx)
}

// readInternalToken reads the internal token file: at most 4 KiB, one
// trailing newline dropped, at least 32 bytes without spaces. The error
// never contains the file's content.
func readInternalToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > 4096 {
		return "", fmt.Errorf("%s: the internal token file is larger than 4 KiB", path)
	}
	tok := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if len(tok) < 32 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%s: the internal token must be at least 32 bytes without spaces or line breaks", path)
	}
	return tok, nil
}

// MaxInternalTokens bounds the tokens of the -internal-token-file: the
// current one and a few being rotated in or out.
const MaxInternalTokens = 4

// readInternalTokens reads the -internal-token-file: at most 4 KiB, one
// token a line (CRLF accepted, blank lines skipped), 1 to
// MaxInternalTokens tokens, each at least 32 bytes without spaces, none
// twice. A file of one token without a newline, the format before
// rotation was supported, is one token. The error never contains the
// file's content.
func readInternalTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > 4096 {
		return nil, fmt.Errorf("%s: the internal token file is larger than 4 KiB", path)
	}
	var toks []string
	for i, line := range strings.Split(string(b), "\n") {
		tok := strings.TrimSuffix(line, "\r")
		if tok == "" {
			continue
		}
		if len(tok) < 32 || strings.ContainsAny(tok, " \t\r") {
			return nil, fmt.Errorf("%s: line %d: an internal token must be at least 32 bytes without spaces", path, i+1)
		}
		for _, old := range toks {
			if old == tok {
				return nil, fmt.Errorf("%s: line %d repeats an earlier token", path, i+1)
			}
		}
		toks = append(toks, tok)
	}
	if len(toks) == 0 || len(toks) > MaxInternalTokens {
		return nil, fmt.Errorf("%s: the internal token file must hold 1 to %d tokens, one a line; it holds %d", path, MaxInternalTokens, len(toks))
	}
	return toks, nil
}

// printCNIFacts reads the current CNI facts of every cluster of the
// configuration at path that has a cniSource and writes them to w as the
// cniQualification records an operator adds once the qualification matrix
// has passed on them (spec §5.3).
func printCNIFacts(path string, w io.Writer) error {
	cfg, err := cluster.Load(path)
	if err != nil {
		return err
	}
	scheme, err := cluster.NewScheme()
	if err != nil {
		return err
	}
	for i := range cfg.Clusters {
		c := &cfg.Clusters[i]
		if c.CNISource == nil {
			continue
		}
		rc, err := c.RESTConfig()
		if err != nil {
			return err
		}
		cl, err := client.New(c.RequestConfig(rc), client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		f, err := cnicheck.Read(ctx, cl, c.CNISource)
		cancel()
		if err != nil {
			return fmt.Errorf("cluster %s: %w", c.ID, err)
		}
		fmt.Fprintf(w, "# cluster %s\ncniQualification: {clusterId: %q, implementation: %q, version: %q, fingerprint: %q, qualifiedAt: %q}\n",
			c.ID, c.ID, f.Implementation, f.Version, f.Fingerprint, time.Now().UTC().Format(time.RFC3339))
	}
	return nil
}
