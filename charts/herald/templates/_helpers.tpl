{{/*
The image of every herald container.
*/}}
{{- define "herald.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
Labels of every object. The selectors use only herald.selectorLabels
(name and component), the same as config/default's, so the two installs
select their pods alike.
*/}}
{{- define "herald.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "herald.selectorLabels" . }}
{{- end }}

{{- define "herald.selectorLabels" -}}
app.kubernetes.io/name: herald
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Labels of a component's pods: the selector's, the release, the user's.
*/}}
{{- define "herald.podLabels" -}}
{{ include "herald.selectorLabels" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Whether the proxy runs in the speakers' process.
*/}}
{{- define "herald.proxyInSpeaker" -}}
{{- if and .Values.speaker.enabled (eq .Values.proxy.mode "speaker") }}true{{ end }}
{{- end }}

{{/*
The proxy's flags, for the speaker or the proxy-only DaemonSet.
*/}}
{{- define "herald.proxyArgs" -}}
- --healthz-bind-address={{ .Values.proxy.healthzBindAddress }}
- --metrics-bind-address={{ include "herald.proxyMetricsBindAddress" . }}
{{- include "herald.conntrackArgs" (dict "Values" .Values "all" false) }}
{{- if .Values.proxy.kubeProxyConfig }}
- --config=/etc/herald/kube-proxy/config.conf
- --kubeconfig=
{{- end }}
{{- range .Values.proxy.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The mount and the volume of proxy.kubeProxyConfig, for the container
running the proxy; empty without it.
*/}}
{{- define "herald.kubeProxyConfigMount" -}}
{{- if .Values.proxy.kubeProxyConfig }}
- name: kube-proxy-config
  mountPath: /etc/herald/kube-proxy
  readOnly: true
{{- end }}
{{- end }}
{{- define "herald.kubeProxyConfigVolume" -}}
{{- if .Values.proxy.kubeProxyConfig }}
- name: kube-proxy-config
  configMap:
    name: herald-kube-proxy-config
{{- end }}
{{- end }}

{{/*
The proxy's health port, from its bind address.
*/}}
{{- define "herald.proxyHealthzPort" -}}
{{ regexFind "[0-9]+$" .Values.proxy.healthzBindAddress }}
{{- end }}

{{/*
The proxy's --metrics-bind-address: proxy.metricsBindAddress, else
kube-proxy's loopback default where the proxy runs in the speakers'
process (their metrics port serves the proxy's metrics too), and every
address for the standalone proxy, whose own port is then what Prometheus
scrapes.
*/}}
{{- define "herald.proxyMetricsBindAddress" -}}
{{- if .Values.proxy.metricsBindAddress -}}
{{ .Values.proxy.metricsBindAddress }}
{{- else if eq .Values.proxy.mode "standalone" -}}
0.0.0.0:10249
{{- else -}}
127.0.0.1:10249
{{- end -}}
{{- end }}

{{/*
The standalone proxy's metrics port when Prometheus can reach it (not
bound to the loopback), else nothing.
*/}}
{{- define "herald.proxyMetricsPort" -}}
{{- $addr := include "herald.proxyMetricsBindAddress" . -}}
{{- $host := regexReplaceAll ":[0-9]+$" $addr "" -}}
{{- if and (eq .Values.proxy.mode "standalone") (not (or (hasPrefix "127." $host) (eq $host "[::1]"))) -}}
{{ regexFind "[0-9]+$" $addr }}
{{- end -}}
{{- end }}

{{/*
The API server's address for every herald container, when configured.
*/}}
{{- define "herald.apiServerEnv" -}}
{{- if .Values.apiServer.host -}}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.apiServer.host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .Values.apiServer.port | toString | quote }}
{{- end }}
{{- end }}

{{/*
The pod network for the proxy, when configured.
*/}}
{{- define "herald.clusterCIDREnv" -}}
{{- if .Values.proxy.clusterCIDR -}}
- name: HERALD_CLUSTER_CIDR
  value: {{ .Values.proxy.clusterCIDR | quote }}
{{- end }}
{{- end }}

{{/*
The least Pod Security level herald's pods need in the release's namespace:
privileged with a speaker or the standalone proxy (host network, NET_ADMIN
and NET_RAW, the node's /run/xtables.lock); nothing with the controller
alone, which meets restricted, the level every namespace admits.
*/}}
{{- define "herald.podSecurityLevel" -}}
{{- if or .Values.speaker.enabled (eq .Values.proxy.mode "standalone") }}privileged{{ end }}
{{- end }}

{{/*
Whether the Pod Security hook labels the namespace: podSecurity.labelNamespace,
true when absent (helm upgrade --reuse-values keeps the values of a release
made before the key existed).
*/}}
{{- define "herald.labelNamespace" -}}
{{- $v := true }}
{{- with .Values.podSecurity }}{{ if hasKey . "labelNamespace" }}{{ $v = .labelNamespace }}{{ end }}{{ end }}
{{- if $v }}true{{ end }}
{{- end }}

{{/*
The annotations of the Pod Security hook's objects, at a weight (RBAC
before the Job): run before install, upgrade and rollback (a rollback
recreates the speakers' pods too, and the namespace's labels may have been
lowered since), deleted once run.
*/}}
{{- define "herald.podSecurityHook" -}}
helm.sh/hook: pre-install,pre-upgrade,pre-rollback
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded,hook-failed
{{- end }}

{{/*
Refuse combinations that cannot work, with a message saying why.
*/}}
{{- define "herald.validate" -}}
{{- if and (eq .Values.proxy.mode "speaker") (not .Values.speaker.enabled) }}
{{- fail "proxy.mode=speaker runs the proxy in the speakers, but speaker.enabled=false: for a proxy-only install set proxy.mode=standalone (and controller.enabled=false)" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled=true needs metrics.service.enabled=true: the ServiceMonitor selects those Services" }}
{{- end }}
{{- if not (or .Values.controller.enabled .Values.speaker.enabled (eq .Values.proxy.mode "standalone")) }}
{{- fail "nothing to install: controller, speaker and the standalone proxy are all disabled" }}
{{- end }}
{{- end }}

{{/*
The proxy's conntrack flags, from proxy.conntrack: all of them for the init
container that writes them; for the proxy (herald.proxyArgs) only those that
differ from kube-proxy's defaults, which are the proxy's too.
*/}}
{{- define "herald.conntrackArgs" -}}
{{- $all := .all -}}
{{- with .Values.proxy.conntrack -}}
{{- if or $all (ne (int64 .maxPerCore) 32768) }}
- --conntrack-max-per-core={{ int64 .maxPerCore }}
{{- end }}
{{- if or $all (ne (int64 .min) 131072) }}
- --conntrack-min={{ int64 .min }}
{{- end }}
{{- if or $all (ne .tcpTimeoutEstablished "24h0m0s") }}
- --conntrack-tcp-timeout-established={{ .tcpTimeoutEstablished }}
{{- end }}
{{- if or $all (ne .tcpTimeoutCloseWait "1h0m0s") }}
- --conntrack-tcp-timeout-close-wait={{ .tcpTimeoutCloseWait }}
{{- end }}
{{- if or $all .tcpBeLiberal }}
- --conntrack-tcp-be-liberal={{ .tcpBeLiberal }}
{{- end }}
{{- if or $all (ne .udpTimeout "0s") }}
- --conntrack-udp-timeout={{ .udpTimeout }}
{{- end }}
{{- if or $all (ne .udpTimeoutStream "0s") }}
- --conntrack-udp-timeout-stream={{ .udpTimeoutStream }}
{{- end }}
{{- end -}}
{{- end }}

{{/*
The init container that writes the conntrack settings (proxy.conntrack.
privilegedInit, off by default): privileged, because only a privileged
container's /proc/sys is writable; it runs `herald conntrack`, which exits
once they are written, and mounts nothing.
*/}}
{{- define "herald.conntrackInit" -}}
{{- if .Values.proxy.conntrack.privilegedInit -}}
initContainers:
  - name: conntrack
    image: {{ include "herald.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
      - conntrack
      {{- include "herald.conntrackArgs" (dict "Values" .Values "all" true) | trim | nindent 6 }}
    securityContext:
      privileged: true
    resources:
      requests:
        cpu: 10m
        memory: 16Mi
{{- end -}}
{{- end }}
