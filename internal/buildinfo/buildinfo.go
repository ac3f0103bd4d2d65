// Package buildinfo exports the build's version stamp (package
// internal/version, set by hack/version.sh) as a Prometheus gauge that is
// always 1, so dashboards and alerts can tell which build each process
// runs (a rollout in progress, a replica left on an old build):
//
//	sandgate_build_info{program, version, commit_time, modified, go_version} 1
//
// program is "gateway", "corectl" or "nodeagent"; version is the 40-hex
// commit or "unknown" (built without hack/version.sh); commit_time is its
// commit time (ISO 8601, empty when unknown); modified is "true" when the
// work tree had changes at build time, else "false"; go_version is the Go
// release the binary was built with (runtime.Version()).
package buildinfo

import (
	"errors"
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/internal/version"
)

// Collector returns the build-info gauge of program, set to 1.
func Collector(program string) prometheus.Collector {
	v := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "sandgate", Name: "build_info",
		Help: "Always 1; the labels say which sandgate build this process runs (version: the commit, or unknown).",
		ConstLabels: prometheus.Labels{"program": program, "version": v.Commit, "commit_time": v.Time,
			"modified": strconv.FormatBool(v.Modified), "go_version": runtime.Version()},
	})
	g.Set(1)
	return g
}

// Register registers program's build-info gauge in reg. Registering it
// again in the same registry (a Caddy configuration reload) is not an
// error; nil reg registers nothing. Any other registration error (another
// collector with the same name and other labels) is returned.
func Register(reg prometheus.Registerer, program string) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(Collector(program))
	if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
		return nil
	}
	return err
}
