// Command cniqualify runs the CNI qualification matrix of spec §5.3
// (package corectl/qualify) against one cluster of corectl's configuration,
// in a namespace the operator names, and prints one line per row. When
// every row passed (or is a manual check, listed for the operator), it
// prints the cniQualification record to paste into the cluster's
// configuration and exits 0; otherwise it exits 1.
//
//	cniqualify -config clusters.yaml -cluster cluster-4 -namespace cni-qualify \
//	  -allowed 203.0.113.10:443 -denied 198.51.100.20:443 [-image busybox:1.36]
//
// The namespace must exist and hold no other NetworkPolicy that selects its
// pods; the kubeconfig of the cluster's configuration needs create, get,
// update, delete and list on NetworkPolicies and pods there, and list on
// namespaces and pods (the DNS selectors). Allowed and denied are TCP
// destinations a pod of that namespace reaches when no policy selects it.
// Exit 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/cnicheck"
	"github.com/sandgate/sandgate/corectl/qualify"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func main() {
	fs := flag.NewFlagSet("cniqualify", flag.ContinueOnError)
	configPath := fs.String("config", "", "corectl's cluster configuration (clusters.yaml)")
	clusterID := fs.String("cluster", "", "the cluster to qualify (its id in -config)")
	ns := fs.String("namespace", "", "the namespace the suite writes its policies and probe pods in")
	allowed := fs.String("allowed", "", "an IPv4 host:port the policies allow")
	denied := fs.String("denied", "", "an IPv4 host:port the policies do not allow")
	image := fs.String("image", qualify.DefaultProbeImage, "the probe pods' image (nc and nslookup)")
	dnsName := fs.String("dns-name", "kubernetes.default.svc", "the name the DNS row resolves")
	timeout := fs.Duration("timeout", 30*time.Minute, "bound on the whole run")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *configPath == "" || *clusterID == "" || *ns == "" || *allowed == "" || *denied == "" {
		fmt.Fprintln(os.Stderr, "cniqualify: -config, -cluster, -namespace, -allowed and -denied are required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ok, err := run(ctx, os.Stdout, *configPath, *clusterID, func(c client.Client, cl *cluster.Cluster) *qualify.Suite {
		return &qualify.Suite{Client: c, Cluster: cl, Namespace: *ns, Allowed: *allowed, Denied: *denied, DNSName: *dnsName,
			Prober: &qualify.PodProber{Client: c, Image: *image}}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cniqualify:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// run loads the configuration, reads the cluster's CNI facts (cniSource)
// when they are not static, runs the suite and prints the report; ok is
// Report.Qualified.
func run(ctx context.Context, w io.Writer, configPath, clusterID string, suite func(client.Client, *cluster.Cluster) *qualify.Suite) (ok bool, err error) {
	cfg, err := cluster.Load(configPath)
	if err != nil {
		return false, err
	}
	c, err := cfg.Lookup(clusterID)
	if err != nil {
		return false, err
	}
	rc, err := c.RESTConfig()
	if err != nil {
		return false, err
	}
	scheme, err := cluster.NewScheme()
	if err != nil {
		return false, err
	}
	// Each request bounded by the cluster's request timeout, the whole
	// run by -timeout.
	cl, err := client.New(c.RequestConfig(rc), client.Options{Scheme: scheme})
	if err != nil {
		return false, err
	}
	if c.CNISource != nil {
		f, err := cnicheck.Read(ctx, cl, c.CNISource)
		c.SetObservedCNI(f, err, time.Now())
		if err != nil {
			return false, fmt.Errorf("cluster %s: read the CNI facts: %w", c.ID, err)
		}
	}
	rep, err := suite(cl, c).Run(ctx)
	if err != nil {
		return false, err
	}
	for _, row := range rep.Rows {
		fmt.Fprintf(w, "%-30s objects %-7s packets %-7s %s | %s\n", row.ID, row.Objects, row.Packets, row.ObjectsDetail, row.PacketsDetail)
	}
	if !rep.Qualified() {
		fmt.Fprintf(w, "cluster %s: not qualified\n", c.ID)
		return false, nil
	}
	for _, m := range rep.ManualChecks() {
		fmt.Fprintf(w, "confirm by hand before pasting the record: %s\n", m)
	}
	f := rep.Facts
	fmt.Fprintf(w, "# cluster %s\ncniQualification: {clusterId: %q, implementation: %q, version: %q, fingerprint: %q, qualifiedAt: %q}\n",
		c.ID, c.ID, f.Implementation, f.Version, f.Fingerprint, time.Now().UTC().Format(time.RFC3339))
	return true, nil
}
