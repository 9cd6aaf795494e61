{{/* Names, labels and the pieces every workload shares. */}}

{{- define "qinglong.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "qinglong.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "qinglong.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "qinglong.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include "qinglong.selectorLabels" (list $ "control") */}}
{{- define "qinglong.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "qinglong.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "qinglong.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "qinglong.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The workers' and the helm test's ServiceAccount: never the control one, which may carry
the bucket role (IRSA / Workload Identity annotations) that user task code must not get. */}}
{{- define "qinglong.workerServiceAccountName" -}}
{{- $sa := .Values.serviceAccount.worker -}}
{{- if $sa.create -}}
{{- default (printf "%s-worker" (include "qinglong.fullname" .)) $sa.name -}}
{{- else -}}
{{- default "default" $sa.name -}}
{{- end -}}
{{- end -}}

{{- define "qinglong.controlName" -}}
{{- printf "%s-control" (include "qinglong.fullname" .) -}}
{{- end -}}

{{/* The workers' (and the helm test's) base URL of control: the Service. */}}
{{- define "qinglong.controlUrl" -}}
{{- printf "http://%s:%d" (include "qinglong.controlName" .) (int .Values.control.service.port) -}}
{{- end -}}

{{/* Image reference: include "qinglong.image" (list $ .Values.image.control). With a digest
(sha256:<64 hex>) repository@digest, the tag ignored; else repository:tag, the tag
defaulting to the chart's appVersion. */}}
{{- define "qinglong.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "qinglong.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.runAsUser }}
runAsGroup: {{ .Values.runAsGroup }}
fsGroup: {{ .Values.runAsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* A uid-isolated worker pod (worker.isolation: uid): root, so it can run each attempt as
its own uid, with every capability dropped but the six that needs (Pod Security baseline);
no privilege escalation (no_new_privs), read-only root, RuntimeDefault seccomp. */}}
{{- define "qinglong.uidWorkerPodSecurityContext" -}}
runAsNonRoot: false
runAsUser: 0
runAsGroup: 0
fsGroup: {{ .Values.runAsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "qinglong.uidWorkerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: false
runAsUser: 0
capabilities:
  drop: ["ALL"]
  add: ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "qinglong.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Env of a schema-owner command (migration Job): the owner's URL and the runtime role. */}}
{{- define "qinglong.migrationEnv" -}}
- name: QL3_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.migration.existingSecret }}
      key: {{ .Values.database.migration.key }}
- name: QL3_RUNTIME_ROLE
  value: {{ .Values.database.runtimeRole | quote }}
{{- end -}}

{{/* The bucket's settings and credentials (control replicas only). */}}
{{- define "qinglong.bucketEnv" -}}
- name: QL3_LOG_BUCKET
  value: {{ .Values.logs.bucket | quote }}
{{- with .Values.logs.s3Endpoint }}
- name: QL3_S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.logs.region }}
- name: AWS_DEFAULT_REGION
  value: {{ . | quote }}
{{- end }}
{{- with .Values.logs.credentials.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.logs.credentials.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.logs.credentials.secretAccessKeyKey }}
{{- end }}
{{- end -}}

{{/* One pool's values: the worker defaults (worker without pools) with each key the pool
gives replacing the default's, even 0, false, {} or [] (sprig merge would drop those); token,
autoscaling and podDisruptionBudget are merged one level deeper, every other key (labels too) is replaced whole.
include "qinglong.poolValues" (list $ $pool) | fromJson (numbers come back as floats). */}}
{{- define "qinglong.poolValues" -}}
{{- $root := index . 0 -}}
{{- $pool := index . 1 -}}
{{- $w := deepCopy (omit $root.Values.worker "pools") -}}
{{- range $key, $value := $pool -}}
{{- if and (has $key (list "token" "autoscaling" "podDisruptionBudget")) (kindIs "map" $value) -}}
{{- $nested := deepCopy (get $w $key | default dict) -}}
{{- range $k, $v := $value -}}
{{- $_ := set $nested $k $v -}}
{{- end -}}
{{- $_ := set $w $key $nested -}}
{{- else -}}
{{- $_ := set $w $key $value -}}
{{- end -}}
{{- end -}}
{{- toJson $w -}}
{{- end -}}

{{/* A hook pod's (migration Job, helm test) nodeSelector, tolerations and affinity: its own
values (migration.* or tests.*), each one falling back to control's when empty.
include "qinglong.hookPlacement" (list $ .Values.migration) */}}
{{- define "qinglong.hookPlacement" -}}
{{- $c := (index . 0).Values.control -}}
{{- $own := index . 1 -}}
{{- with default $c.nodeSelector $own.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with default $c.tolerations $own.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with default $c.affinity $own.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Settings a rendering cannot go on without. */}}
{{- define "qinglong.required" -}}
{{- $_ := required "database.runtime.existingSecret: the Secret holding the control replicas' database URL" .Values.database.runtime.existingSecret -}}
{{- $_ := required "database.migration.existingSecret: the Secret holding the schema owner's database URL" .Values.database.migration.existingSecret -}}
{{- $_ := required "logs.bucket: the bucket of the workers' logs" .Values.logs.bucket -}}
{{- $seen := dict -}}
{{- /* Secret/key -> who imports it: one token under two names fails the hook on the
unique hash, so each pool (and the bootstrap admin) needs its own. */ -}}
{{- $tokens := dict -}}
{{- $admin := .Values.bootstrapAdmin -}}
{{- if $admin.existingSecret -}}
{{- $_ := set $tokens (printf "%s/%s" $admin.existingSecret (default $admin.tokenKey $admin.sha256Key)) "bootstrapAdmin" -}}
{{- end -}}
{{- range $p := .Values.worker.pools -}}
{{- $w := include "qinglong.poolValues" (list $ $p) | fromJson -}}
{{- $_ := required (printf "worker.pools[%s].token.existingSecret: the Secret holding the pool's worker token" $w.name) $w.token.existingSecret -}}
{{- if hasKey $seen $w.name -}}
{{- fail (printf "worker.pools: the pool name %q is given twice" $w.name) -}}
{{- end -}}
{{- $_ := set $seen $w.name true -}}
{{- $token := printf "%s/%s" $w.token.existingSecret $w.token.key -}}
{{- if hasKey $tokens $token -}}
{{- fail (printf "worker.pools[%s].token uses the Secret key %s of %s: each pool needs its own token Secret (one token cannot be imported under two names)" $w.name $token (get $tokens $token)) -}}
{{- end -}}
{{- $_ := set $tokens $token (printf "worker.pools[%s].token" $w.name) -}}
{{- $overlap := int $w.tokenRotationOverlapSeconds -}}
{{- $least := add (int $w.drainBudgetSeconds) (int $w.graceSeconds) 60 -}}
{{- if and (gt $overlap 0) (lt $overlap (int $least)) -}}
{{- fail (printf "worker.pools[%s].tokenRotationOverlapSeconds: %d is shorter than drainBudgetSeconds + graceSeconds + 60 = %d; the old token must outlive the pool's rollout, about replicas x (drainBudgetSeconds + graceSeconds + start time), or 0 to revoke it at once" $w.name $overlap (int $least)) -}}
{{- end -}}
{{- if and (gt (int $w.concurrency) 1) (eq $w.isolation "none") (not $w.allowSharedUid) -}}
{{- fail (printf "worker.pools[%s]: concurrency %d needs isolation: uid (attempts sharing a user read each other's secrets through /proc), or concurrency: 1 (scale with replicas), or allowSharedUid: true to accept that" $w.name (int $w.concurrency)) -}}
{{- end -}}
{{- if and $w.autoscaling.enabled (gt (int $w.autoscaling.minReplicas) (int $w.autoscaling.maxReplicas)) -}}
{{- fail (printf "worker.pools[%s].autoscaling: minReplicas is above maxReplicas" $w.name) -}}
{{- end -}}
{{- end -}}
{{- if hasKey .Values.control.topologySpread "whenUnsatisfiable" -}}
{{- fail "control.topologySpread.whenUnsatisfiable is replaced by control.topologySpread.zone.whenUnsatisfiable and control.topologySpread.hostname.whenUnsatisfiable (each ScheduleAnyway by default): set those instead" -}}
{{- end -}}
{{- if gt (mul 3 (int .Values.control.heartbeatMs)) (int .Values.control.leaseMs) -}}
{{- fail "control.heartbeatMs must be at most a third of control.leaseMs" -}}
{{- end -}}
{{- end -}}

{{/* The helm test's token Secret and key: tests.token, else the bootstrap admin's Secret
when it holds the token itself (not only its hash); empty: no helm test is rendered. */}}
{{- define "qinglong.testTokenSecret" -}}
{{- if .Values.tests.token.existingSecret -}}
{{- .Values.tests.token.existingSecret -}}
{{- else if not .Values.bootstrapAdmin.sha256Key -}}
{{- .Values.bootstrapAdmin.existingSecret -}}
{{- end -}}
{{- end -}}
{{- define "qinglong.testTokenKey" -}}
{{- if .Values.tests.token.existingSecret -}}{{ .Values.tests.token.key }}{{- else -}}{{ .Values.bootstrapAdmin.tokenKey }}{{- end -}}
{{- end -}}

{{/* A label map as k=v,k2=v2 in key order (the `--labels` and `--pool-labels` form). */}}
{{- define "qinglong.labelList" -}}
{{- $pairs := list -}}
{{- range $k, $v := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* One NetworkPolicy egress rule: (list peers ports); no peers: any destination on these
ports. */}}
{{- define "qinglong.egressRule" -}}
- {{- with index . 0 }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    {{- range index . 1 }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
{{- end -}}

{{/* A quantity (values.schema.json's `quantity`: digits, an optional fraction and suffix, or
a plain number) as a number of bytes, a float: include "qinglong.quantityBytes" "1.5Gi". */}}
{{- define "qinglong.quantityBytes" -}}
{{- if kindIs "string" . -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $suffix := trimPrefix $number . -}}
{{- $scale := dict "" 1 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976 -}}
{{- if not (and $number (hasKey $scale $suffix)) -}}
{{- fail (printf "%q is not a quantity this chart can add up" .) -}}
{{- end -}}
{{- mulf (float64 $number) (get $scale $suffix) -}}
{{- else -}}
{{- float64 . -}}
{{- end -}}
{{- end -}}

{{/* A worker pool's container resources: the pool's, plus an ephemeral-storage request of
the sum of its emptyDirs' sizeLimits (work, tmp, spool) unless the pool's resources already
request or limit ephemeral-storage (a limit alone is then also the request). Whole Mi are
written as Mi, anything else as bytes. include "qinglong.workerResources" $w */}}
{{- define "qinglong.workerResources" -}}
{{- $resources := deepCopy (default dict .resources) -}}
{{- $requests := default dict $resources.requests -}}
{{- $limits := default dict $resources.limits -}}
{{- if not (or (hasKey $requests "ephemeral-storage") (hasKey $limits "ephemeral-storage")) -}}
{{- $sum := 0.0 -}}
{{- range list .workSizeLimit .tmpSizeLimit .spoolSizeLimit -}}
{{- $sum = addf $sum (include "qinglong.quantityBytes" .) -}}
{{- end -}}
{{- $bytes := ceil $sum | int64 -}}
{{- if eq (mod $bytes 1048576) 0 -}}
{{- $_ := set $requests "ephemeral-storage" (printf "%dMi" (div $bytes 1048576)) -}}
{{- else -}}
{{- $_ := set $requests "ephemeral-storage" (printf "%d" $bytes) -}}
{{- end -}}
{{- $_ := set $resources "requests" $requests -}}
{{- end -}}
{{- toYaml $resources -}}
{{- end -}}

{{/* "true" when a pool gets a PodDisruptionBudget (enabled, and it may have pods: autoscaled
or replicas above 0), else empty. include "qinglong.workerHasBudget" $w */}}
{{- define "qinglong.workerHasBudget" -}}
{{- if and .podDisruptionBudget.enabled (or .autoscaling.enabled (gt (int .replicas) 0)) -}}
true
{{- end -}}
{{- end -}}
