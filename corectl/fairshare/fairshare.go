// Package fairshare bounds the apiserver requests corectl makes for each
// credential's API calls: every credential has a share, a token bucket of
// Config.Rate requests a second up to Config.Burst, of its cluster's
// apiserver requests (the cluster client's own limit,
// cluster.DefaultClientQPS, is shared by every tenant of the cluster and by
// corectl's reconcilers).
package fairshare

// Defaults of Config: a credential's apiserver requests a second and its
// burst. 100 a second is a third of the cluster client's default rate
// (cluster.DefaultClientQPS, 300), so one tenant spending its share leaves
// the others and corectl's reconcilers at least two thirds of it; 600 is
// the client's default burst (cluster.DefaultClientBurst), about 25
// creates or 50 sandbox reads at once.
const (
	DefaultRate  = 100
	DefaultBurst = 600
)

// Config is each credential's share. The zero value is the defaults.
type Config struct {
	// Rate is the share's refill in apiserver requests a second (default
	// DefaultRate); negative turns the shares off.
	Rate float64
	// Burst is the share's size in apiserver requests (default
	// DefaultBurst).
	Burst int
}
