{{/* Base name of every object: the release name, or "<release>-ascend-dra" when it lacks the chart name.
At most 49 characters, so that the longest suffix that ends up in a label value or a DNS label,
"-kubeletplugin" (the DaemonSet's app.kubernetes.io/name, its ServiceAccount), stays within 63. */}}
{{- define "ascend-dra.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 49 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 49 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ascend-dra.labels" -}}
app.kubernetes.io/part-of: ascend-dra
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ascend-dra.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "ascend-dra.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (printf "%s-kubeletplugin" (include "ascend-dra.fullname" .)) -}}
{{- end -}}

{{/* "true" when a profile that touches real NPUs (anything but fake) is loaded. */}}
{{- define "ascend-dra.realProfiles" -}}
{{- $real := false -}}
{{- range .Values.profiles -}}{{- if ne . "fake" -}}{{- $real = true -}}{{- end -}}{{- end -}}
{{- $real -}}
{{- end -}}

{{/* "true" when an Ascend chip profile is loaded (they read npu-smi, /dev/davinci*, the driver dir). */}}
{{- define "ascend-dra.ascendProfiles" -}}
{{- $ascend := false -}}
{{- range .Values.profiles -}}{{- if has . (list "npu-310P" "npu-910" "HAMivNPUCore" "hard-vNPU") -}}{{- $ascend = true -}}{{- end -}}{{- end -}}
{{- $ascend -}}
{{- end -}}

{{- define "ascend-dra.privileged" -}}
{{- if kindIs "bool" .Values.daemon.privileged -}}{{- .Values.daemon.privileged -}}{{- else -}}{{- include "ascend-dra.realProfiles" . -}}{{- end -}}
{{- end -}}

{{/* PROFILE_OPTIONS: PROFILE.KEY=VALUE,... from .Values.profileOptions (sorted, so renders are stable). */}}
{{- define "ascend-dra.profileOptions" -}}
{{- $opts := list -}}
{{- range $profile, $kv := .Values.profileOptions -}}
{{- range $key, $value := $kv -}}
{{- $opts = append $opts (printf "%s.%s=%v" $profile $key $value) -}}
{{- end -}}
{{- end -}}
{{- join "," $opts -}}
{{- end -}}

{{- define "ascend-dra.webhookName" -}}
{{- printf "%s-webhook" (include "ascend-dra.fullname" .) -}}
{{- end -}}

{{- define "ascend-dra.webhookSecret" -}}
{{- .Values.webhook.certificate.secretName | default (printf "%s-tls" (include "ascend-dra.webhookName" .)) -}}
{{- end -}}

{{/* The webhooks never see kube-system, the release's namespace, or objects labelled ascend.project-hami.io/webhook=ignore. */}}
{{- define "ascend-dra.webhookSelectors" -}}
namespaceSelector:
  matchExpressions:
  - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, {{ .Release.Namespace }}]}
  - {key: ascend.project-hami.io/webhook, operator: NotIn, values: [ignore]}
objectSelector:
  matchExpressions:
  - {key: ascend.project-hami.io/webhook, operator: NotIn, values: [ignore]}
{{- end -}}
