{{/* The public listeners: values key, object name suffix, Service, port, path. */}}
{{- define "sandgate.listeners" -}}
- {key: dataplane, name: gateway-dataplane, service: gateway, port: 30083, path: /}
- {key: nodeConnect, name: gateway-node-connect, service: gateway-node-connect, port: 30085, path: /api/v1/sandbox-node}
- {key: api, name: corectl-api, service: corectl, port: 8090, path: /}
{{- end -}}
