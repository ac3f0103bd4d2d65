package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/nsrights"
	"github.com/sandgate/sandgate/gateway/credential"
)

// rbacUsage is what `corectl rbac -h` prints before the flags.
const rbacUsage = `Usage:
  corectl rbac -config clusters.yaml -credentials credentials.yaml [-cluster ID] [-service-account ns/name] | kubectl apply -f -
Prints the RoleBindings corectl needs in one compute cluster: corectl-ingress-namespace in the
cluster's ingress namespace and corectl-project-namespace in every project namespace the
credential file names for it (the namespaces must exist). docs/deploy.md "Compute clusters".
Exit status: 0; 1 on an invalid file, an unknown -cluster or a malformed -service-account; 2 on bad flags.

Flags:
`

// runRBAC is `corectl rbac`: it prints, as YAML documents for `kubectl
// apply -f -` in one compute cluster, the RoleBindings corectl needs there
// (package nsrights): ClusterRole corectl-ingress-namespace in the
// cluster's ingress namespace and corectl-project-namespace in every
// project namespace the credential file names for that cluster. The
// namespaces must exist. Flags: -config (required), -credentials
// (required), -cluster (required when -config has more than one cluster),
// -service-account namespace/name (default corectl-system/corectl).
// Errors: unreadable or invalid files, an unknown -cluster, a malformed
// -service-account; bad flags exit 2.
func runRBAC(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("corectl rbac", flag.ContinueOnError)
	configPath := fs.String("config", "", "cluster configuration file (YAML or JSON), as corectl's -config")
	credPath := fs.String("credentials", "", "resource credential file (YAML or JSON), as corectl's -credentials")
	clusterID := fs.String("cluster", "", "ID of the cluster to print for (required when -config has several)")
	saFlag := fs.String("service-account", nsrights.DefaultServiceAccount.Namespace+"/"+nsrights.DefaultServiceAccount.Name, "corectl's ServiceAccount in the cluster, namespace/name")
	if code, stop := parseFlags(fs, rbacUsage, args); stop {
		os.Exit(code)
	}
	if *configPath == "" || *credPath == "" {
		fmt.Fprintln(os.Stderr, "corectl rbac: -config and -credentials are required")
		os.Exit(2)
	}
	ns, name, ok := strings.Cut(*saFlag, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("-service-account %q: want namespace/name", *saFlag)
	}
	cfg, err := cluster.Load(*configPath)
	if err != nil {
		return err
	}
	var c *cluster.Cluster
	for i := range cfg.Clusters {
		if cfg.Clusters[i].ID == *clusterID || (*clusterID == "" && len(cfg.Clusters) == 1) {
			c = &cfg.Clusters[i]
		}
	}
	if c == nil {
		if *clusterID == "" {
			return fmt.Errorf("%s has %d clusters: name one with -cluster", *configPath, len(cfg.Clusters))
		}
		return fmt.Errorf("%s has no cluster %q", *configPath, *clusterID)
	}
	creds, err := credential.OpenFile(*credPath, nil)
	if err != nil {
		return err
	}
	all := creds.Load()
	if err := creds.Close(); err != nil {
		return err
	}
	for i, b := range nsrights.Bindings(nsrights.Needed(c, all), nsrights.ServiceAccount{Namespace: ns, Name: name}) {
		y, err := yaml.Marshal(b)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		if _, err := out.Write(y); err != nil {
			return err
		}
	}
	return nil
}
