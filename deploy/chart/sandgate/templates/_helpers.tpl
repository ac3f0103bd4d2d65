{{/* The labels of every object: the bases' part-of label and Helm's own. */}}
{{- define "sandgate.labels" -}}
app.kubernetes.io/part-of: sandgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image reference: (dict "root" $ "image" .Values.gateway.image). */}}
{{- define "sandgate.image" -}}
{{- $repo := .image.repository -}}
{{- with .root.Values.image.registry }}{{ $repo = printf "%s/%s" . $repo }}{{ end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The pod spec fields both Deployments take from values: (dict "root" $ "c" .Values.gateway). */}}
{{- define "sandgate.podExtras" -}}
{{- with .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pod security context of both Deployments (restricted Pod Security). */}}
{{- define "sandgate.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{/* The container security context of both Deployments. */}}
{{- define "sandgate.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* The rendered gateway-config files (chart copies overridden by gateway.configFiles). */}}
{{- define "sandgate.gatewayConfigFiles" -}}
{{- $files := dict -}}
{{- range $path, $_ := .Files.Glob "files/gateway/*" -}}
{{- $_ := set $files (base $path) ($.Files.Get $path) -}}
{{- end -}}
{{- if .Values.e2bDomain.enabled -}}
{{- $_ := set $files "e2b-domain.caddyfile" (include "sandgate.e2bDomainCaddyfile" .) -}}
{{- end -}}
{{- if .Values.tlsCaddy.enabled -}}
{{- $_ := set $files "tls.caddyfile" (.Files.Get "files/tls-caddy/tls.caddyfile") -}}
{{- end -}}
{{- range $name, $content := .Values.gateway.configFiles -}}
{{- $_ := set $files $name $content -}}
{{- end -}}
{{- toYaml $files -}}
{{- end -}}

{{/* The E2B_DOMAIN site, as deploy/overlays/example-e2b-domain/e2b-domain.caddyfile with e2bDomain.domain. */}}
{{- define "sandgate.e2bDomainCaddyfile" -}}
# E2B_DOMAIN={{ .Values.e2bDomain.domain }} (docs/dataplane.md "Host routing"), from the chart's
# e2bDomain values. The certificate is the Secret {{ .Values.e2bDomain.tlsSecretName }}, a wildcard for *.{{ .Values.e2bDomain.domain }}.
https://*.{{ .Values.e2bDomain.domain }}:8443 {
	tls {
		get_certificate key_pair_files /etc/sandgate/tls/tls.crt /etc/sandgate/tls/tls.key
	}
	log {
		format filter {
			request>headers>X-Access-Token delete
			request>headers>E2b-Traffic-Access-Token delete
		}
	}
	@api host api.{{ .Values.e2bDomain.domain }}
	handle @api {
		reverse_proxy corectl:8090
	}
	handle {
		e2b_dataplane {
			hosts {{ .Values.e2bDomain.domain }}
			home_dir /home/user
			user root 0 0 /root
			user user 1000 1000 /home/user
			transport http {
				dial_timeout 3s
				response_header_timeout 30s
			}
		}
	}
}
{{ end -}}
