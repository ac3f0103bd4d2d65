package harness

// DomainSites are the sites of a gateway serving E2B_DOMAIN=sbx.test, for
// the Caddyfiles of the tests that drive the SDKs through host routing
// (integration/controle2e and integration/realpeers; each writes its own
// global options before them): *.sbx.test on {{IP}}:443 over TLS from
// Caddy's internal CA, api.sbx.test to corectl ({{CORECTL}}), every other
// host to the data plane's host routing, an access log at {{ACCESS_LOG}}
// without either token; the plain {{ADDR}} site is the harness's readiness
// check.
const DomainSites = `https://*.sbx.test:443 {
	bind {{IP}}
	tls internal
	log {
		output file {{ACCESS_LOG}}
		format filter {
			request>headers>X-Access-Token delete
			request>headers>E2b-Traffic-Access-Token delete
		}
	}
	@api host api.sbx.test
	handle @api {
		reverse_proxy {{CORECTL}}
	}
	handle {
		e2b_dataplane {
			hosts sbx.test
			home_dir /home/user
			user root 0 0 /root
		}
	}
}

http://{{ADDR}} {
	bind 127.0.0.1
	e2b_dataplane
}
`
