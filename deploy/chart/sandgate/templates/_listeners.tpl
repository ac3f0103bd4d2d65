{{/* The public listeners (the same names and backends as deploy/components/ingress-nginx and gateway-api):
values key, object name, Service, port, HTTPRoute request timeout (0s: none, for the streams). */}}
{{- define "sandgate.listeners" -}}
- {key: dataplane, name: gateway, service: gateway, port: 30083, timeout: 0s}
- {key: nodeConnect, name: gateway-node-connect, service: gateway-node-connect, port: 30085, timeout: 0s}
- {key: api, name: corectl-api, service: corectl, port: 8090, timeout: 5m}
{{- end -}}
