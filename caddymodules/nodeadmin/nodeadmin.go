// Package nodeadmin is the Caddy module admin.api.sandgate: the operator's
// routes for sandbox nodes under Caddy's admin endpoint, a thin adapter
// over package nodecore/admin acting on the running sandgate app.
package nodeadmin

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/nodecore/admin"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI is the admin.api.sandgate module: the operator's routes for
// sandbox nodes under Caddy's admin endpoint (package nodecore/admin), e.g.
//
//	curl localhost:2019/sandgate/pools
//	curl -X PUT -H 'Content-Type: application/json' localhost:2019/sandgate/pools/default/deployment \
//	     -d '{"generation": 8, "release": "busybox-8", "serving_generation": 7}'
//	curl -X POST -H 'Content-Type: application/json' localhost:2019/sandgate/enrolment-tokens \
//	     -d '{"pool": "default", "ttl": "1h"}'
//
// Caddy loads every admin.api module by itself; it has no configuration.
// The routes act on the running config's sandgate app and answer 503 when
// it has no nodes block.
type AdminAPI struct{}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.sandgate", New: func() caddy.Module { return new(AdminAPI) }}
}

// Routes returns the admin routes.
func (AdminAPI) Routes() []caddy.AdminRoute {
	h := &admin.Handler{State: func() admin.State {
		a := sandgate.Current()
		if a == nil {
			return nil
		}
		return adminState{a}
	}}
	serve := caddy.AdminHandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		h.ServeHTTP(w, r)
		return nil
	})
	var routes []caddy.AdminRoute
	for _, p := range []string{admin.PoolsPath, admin.PoolsPath + "/", admin.TokensPath, admin.EnrolledPath, admin.EnrolledPath + "/"} {
		routes = append(routes, caddy.AdminRoute{Pattern: p, Handler: serve})
	}
	return routes
}

// adminState adapts the app to admin.State.
type adminState struct{ a *sandgate.App }

func (s adminState) Pools() *pool.Registry         { return s.a.NodePools() }
func (s adminState) Releases() *releasestore.Store { return s.a.Releases() }

// Enrolment returns the app's enrolment store, or a nil interface without
// one.
func (s adminState) Enrolment() admin.Enrolments {
	if e := s.a.NodeEnrolment(); e != nil {
		return e
	}
	return nil
}

// Interface guard.
var _ caddy.AdminRouter = AdminAPI{}
