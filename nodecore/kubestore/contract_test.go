package kubestore_test

import (
	"testing"
	"time"

	"github.com/sandgate/sandgate/nodecore/enrolment/enrolmenttest"
	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/placement/placementtest"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/pool/pooltest"
)

// The contracts the file stores pass, run against the Kubernetes stores:
// each Open is another replica (a new Store, with its own watches) on the
// same namespace of the real kube-apiserver.

func TestPoolContract(t *testing.T) {
	pooltest.Run(t, func(t *testing.T) pooltest.Store {
		ns := namespace(t)
		return pooltest.Store{
			Open: func(t *testing.T) *pool.Registry {
				r, err := open(t, ns, nil, nil).Pools()
				if err != nil {
					t.Fatal(err)
				}
				return r
			},
			Snapshot: func(t *testing.T) string { return snapshot(t, ns) },
			Shared:   true,
		}
	})
}

func TestPlacementContract(t *testing.T) {
	placementtest.Run(t, func(t *testing.T) placementtest.Store {
		ns := namespace(t)
		return placementtest.Store{
			Open:   func(t *testing.T) placement.Store { return open(t, ns, nil, nil).Placements() },
			Shared: true,
		}
	})
}

func TestEnrolmentContract(t *testing.T) {
	enrolmenttest.Run(t, func(t *testing.T) enrolmenttest.Store {
		ns := namespace(t)
		return enrolmenttest.Store{
			Open: func(t *testing.T, now func() time.Time) enrolmenttest.Enrolments {
				return open(t, ns, nil, now).Enrolment()
			},
			Snapshot: func(t *testing.T) string { return snapshot(t, ns) },
			// An identity that may read the objects and write none.
			Broken: func(t *testing.T, now func() time.Time) enrolmenttest.Enrolments {
				return open(t, ns, limited(t, ns, nil), now).Enrolment()
			},
			Shared: true,
		}
	})
}
