package proto

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// validate applies the field rules of docs/node-protocol.md to f; Decode
// and Encode both call it, so neither end sends what the other refuses.
func validate(f Frame) error {
	switch f := f.(type) {
	case *Hello:
		return f.validate()
	case *Welcome:
		return f.validate()
	case *Heartbeat:
		return f.validate()
	case *HeartbeatAck:
		return f.validate()
	case *Request:
		return f.validate()
	case *Response:
		return f.validate()
	case *Retention:
		return f.validate()
	case *RetentionAck:
		return f.validate()
	}
	return newError(ErrType, "", "not a frame")
}

// IsUUID reports whether s is a UUID in canonical lowercase 8-4-4-4-12
// hexadecimal form (the form of node_id, installation_id, connection_id
// and request and retention ids).
func IsUUID(s string) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	// Every id of every frame is checked when encoded and when decoded:
	// one table lookup per character and no branch (notHex['-'] is 1).
	var bad byte
	for _, r := range [...][2]int{{0, 8}, {9, 13}, {14, 18}, {19, 23}, {24, 36}} {
		for i := r[0]; i < r[1]; i++ {
			bad |= notHex[s[i]]
		}
	}
	return bad == 0
}

// IsDigest reports whether s is a SHA-256 digest in lowercase hexadecimal
// (64 characters; specification_digest, backend_fingerprint).
func IsDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	var bad byte
	for i := range len(s) {
		bad |= notHex[s[i]]
	}
	return bad == 0
}

// notHex is 0 for the bytes 0-9 and a-f and 1 for every other byte.
var notHex = func() (t [256]byte) {
	for c := range 256 {
		if !isLowerHex(byte(c)) {
			t[c] = 1
		}
	}
	return t
}()

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// IsIdentifier reports whether s is a Reference or Snapshot identifier:
// 1..MaxIdentifierLength characters from [A-Za-z0-9._-], starting with a
// letter or digit.
func IsIdentifier(s string) bool {
	if len(s) == 0 || len(s) > MaxIdentifierLength {
		return false
	}
	for i := range len(s) {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// IsCode reports whether s has the form of a diagnostic or error code:
// 1..64 characters from [a-z0-9_].
func IsCode(s string) bool {
	if len(s) == 0 || len(s) > MaxDiagnosticLength {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// isPrintableASCII reports whether s is 1..max bytes of 0x20..0x7e.
func isPrintableASCII(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// isText reports whether s is valid UTF-8 without NUL (argv, env, cwd).
func isText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// Valid reports whether p is a known provider.
func (p Provider) Valid() bool { return p == ProviderDocker || p == ProviderMicrosandbox }

// Valid reports whether s is ready, preparing or failed.
func (s GenerationState) Valid() bool {
	return s == GenerationReady || s == GenerationPreparing || s == GenerationFailed
}

// Valid reports whether s is running, stopped or suspended.
func (s InstanceState) Valid() bool {
	return s == StateRunning || s == StateStopped || s == StateSuspended
}

// Valid reports whether op is one of the 15 Operations.
func (op Operation) Valid() bool {
	_, ok := operationTable[op]
	return ok
}

func positive(v int64, ptr string) error {
	if v <= 0 {
		return fieldErr(ptr, "must be a positive 64-bit integer")
	}
	return nil
}

func uuidField(s, ptr string) error {
	if !IsUUID(s) {
		return fieldErr(ptr, "must be a canonical lowercase UUID")
	}
	return nil
}

func digestField(s, ptr string) error {
	if !IsDigest(s) {
		return fieldErr(ptr, "must be a lowercase hex SHA-256 digest")
	}
	return nil
}

func diagnosticField(s, ptr string) error {
	if s != "" && !IsCode(s) {
		return fieldErr(ptr, "must be a diagnostic code [a-z0-9_]{1,64}")
	}
	return nil
}

func timeField(t time.Time, ptr string) error {
	if t.IsZero() {
		return fieldErr(ptr, "must be a non-zero RFC 3339 time")
	}
	return nil
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (h *Hello) validate() error {
	if err := first(
		uuidField(h.NodeID, "/node_id"),
		uuidField(h.InstallationID, "/installation_id"),
	); err != nil {
		return err
	}
	if !h.Provider.Valid() {
		return fieldErr("/provider", "must be docker or microsandbox")
	}
	if err := first(
		digestField(h.BackendFingerprint, "/backend_fingerprint"),
		positive(h.DeploymentGeneration, "/deployment_generation"),
		digestField(h.SpecificationDigest, "/specification_digest"),
	); err != nil {
		return err
	}
	if h.MaxActive < 1 || h.MaxActive > MaxActiveOperations {
		return fieldErr("/max_active", "must be 1..32")
	}
	if h.MaxRetained < 0 || h.MaxRetained > MaxRetainedGenerations {
		return fieldErr("/max_retained", "must be 0..1024")
	}
	if err := h.Health.validate(); err != nil {
		return under(err, "/health")
	}
	if len(h.Generations) > 0 && !h.GenerationManagement {
		return fieldErr("/generations", "generation observations require generation_management")
	}
	return validateObservations(h.Generations)
}

func (h *Health) validate() error {
	if err := diagnosticField(h.Diagnostic, "/diagnostic"); err != nil {
		return err
	}
	if h.ProviderReady && h.Diagnostic != "" {
		return fieldErr("/diagnostic", "a ready provider reports no diagnostic")
	}
	if err := timeField(h.ObservedAt, "/observed_at"); err != nil {
		return err
	}
	if h.ActiveOperations < 0 || h.ActiveOperations > MaxActiveOperations {
		return fieldErr("/active_operations", "must be 0..32")
	}
	if err := h.Host.validate(); err != nil {
		return under(err, "/host")
	}
	return nil
}

func (m *HostMeasurements) validate() error {
	switch {
	case m.CPUCount < 1:
		return fieldErr("/cpu_count", "must be at least 1")
	case !(m.CPUPercent >= 0 && m.CPUPercent <= 100):
		return fieldErr("/cpu_percent", "must be 0..100")
	case m.MemoryUsedBytes > m.MemoryTotalBytes:
		return fieldErr("/memory_used_bytes", "must not exceed memory_total_bytes")
	case m.DiskUsedBytes > m.DiskTotalBytes:
		return fieldErr("/disk_used_bytes", "must not exceed disk_total_bytes")
	}
	return nil
}

func validateObservations(obs []GenerationObservation) error {
	if len(obs) > MaxGenerations {
		return fieldErr("/generations", "at most 8 generation observations per frame")
	}
	for i := range obs {
		if err := obs[i].validate(); err != nil {
			return underIndex(err, "/generations", i)
		}
		for j := range i {
			if obs[j].Generation == obs[i].Generation {
				return fieldErr("/generations/"+strconv.Itoa(i)+"/generation", "one observation per generation")
			}
		}
	}
	return nil
}

func (o *GenerationObservation) validate() error {
	if err := first(
		positive(o.Generation, "/generation"),
		digestField(o.SpecificationDigest, "/specification_digest"),
	); err != nil {
		return err
	}
	if !o.State.Valid() {
		return fieldErr("/state", "must be ready, preparing or failed")
	}
	if err := diagnosticField(o.Diagnostic, "/diagnostic"); err != nil {
		return err
	}
	if o.State == GenerationReady && o.Diagnostic != "" {
		return fieldErr("/diagnostic", "a ready generation reports no diagnostic")
	}
	return nil
}

func (d *Deployment) validate() error {
	if err := first(
		positive(d.Generation, "/generation"),
		digestField(d.SpecificationDigest, "/specification_digest"),
	); err != nil {
		return err
	}
	if d.ServingGeneration != nil {
		return positive(*d.ServingGeneration, "/serving_generation")
	}
	return nil
}

func validateDeployment(d *Deployment) error {
	if d == nil {
		return nil
	}
	return under(d.validate(), "/deployment")
}

func (w *Welcome) validate() error {
	return first(
		uuidField(w.ConnectionID, "/connection_id"),
		positive(w.OwnerEpoch, "/owner_epoch"),
		validateDeployment(w.Deployment),
	)
}

func (h *Heartbeat) validate() error {
	if err := first(
		uuidField(h.ConnectionID, "/connection_id"),
		positive(h.OwnerEpoch, "/owner_epoch"),
	); err != nil {
		return err
	}
	if err := h.Health.validate(); err != nil {
		return under(err, "/health")
	}
	return validateObservations(h.Generations)
}

func (a *HeartbeatAck) validate() error {
	return first(
		uuidField(a.ConnectionID, "/connection_id"),
		positive(a.OwnerEpoch, "/owner_epoch"),
		validateDeployment(a.Deployment),
	)
}

func (r *Reference) validate() error {
	switch {
	case !IsIdentifier(r.TenantID):
		return fieldErr("/tenant_id", "must be an identifier")
	case !IsIdentifier(r.EnvironmentID):
		return fieldErr("/environment_id", "must be an identifier")
	case !IsIdentifier(r.AllocationID):
		return fieldErr("/allocation_id", "must be an identifier")
	}
	return nil
}

// envelopeValid reports whether the members the node needs to answer or
// reject a request by connection, epoch and sequence are valid.
func (r *Request) envelopeValid() bool {
	return IsUUID(r.ID) && r.Sequence >= 1 && IsUUID(r.ConnectionID) && r.OwnerEpoch > 0
}

func (r *Request) validate() error {
	if err := uuidField(r.ID, "/id"); err != nil {
		return err
	}
	if r.Sequence < 1 {
		return fieldErr("/sequence", "must be at least 1")
	}
	if err := first(
		uuidField(r.ConnectionID, "/connection_id"),
		positive(r.OwnerEpoch, "/owner_epoch"),
		positive(r.DeploymentGeneration, "/deployment_generation"),
	); err != nil {
		return err
	}
	spec, ok := operationTable[r.Operation]
	if !ok {
		return fieldErr("/operation", "must be one of the 15 operations")
	}
	if r.TimeoutMS < MinTimeoutMS || r.TimeoutMS > MaxTimeoutMS {
		return fieldErr("/timeout_ms", "must be 1..120000")
	}
	if err := r.Reference.validate(); err != nil {
		return under(err, "/reference")
	}
	present := r.params()
	for _, p := range paramOrder {
		switch {
		case present&p.bit != 0 && (spec.required|spec.optional)&p.bit == 0:
			return newError(ErrParameters, "/"+p.name, "the operation takes no such parameter")
		case present&p.bit == 0 && spec.required&p.bit != 0:
			return newError(ErrParameters, "/"+p.name, "the operation requires this parameter")
		}
	}
	if r.Bootstrap != nil {
		if err := r.Bootstrap.validate(); err != nil {
			return under(err, "/bootstrap")
		}
	}
	if r.Command != nil {
		if err := r.Command.validate(); err != nil {
			return under(err, "/command")
		}
	}
	if r.Observation != nil && r.Observation.Kind != ObservationResources {
		return fieldErr("/observation/kind", "must be resources")
	}
	if r.Generation != nil {
		if err := positive(*r.Generation, "/generation"); err != nil {
			return err
		}
	}
	if r.Snapshot != nil {
		if err := r.Snapshot.validate(); err != nil {
			return under(err, "/snapshot")
		}
	}
	if r.Compute != nil {
		if err := positive(r.Compute.Generation, "/compute/generation"); err != nil {
			return err
		}
	}
	if r.Suspend != nil {
		if err := r.Suspend.Snapshot.validate(); err != nil {
			return under(err, "/suspend/snapshot")
		}
	}
	if r.Resume != nil {
		if err := r.Resume.Snapshot.validate(); err != nil {
			return under(err, "/resume/snapshot")
		}
	}
	return nil
}

func (s *Snapshot) validate() error {
	if !IsIdentifier(s.ID) {
		return fieldErr("/id", "must be an identifier")
	}
	return nil
}

func validateEnv(env map[string]string) error {
	if len(env) > MaxCommandEnv {
		return fieldErr("/env", "at most 1024 variables")
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if k == "" || strings.IndexByte(k, '=') >= 0 || !isText(k) || !isText(env[k]) {
			return fieldErr("/env"+string(appendPointerToken(nil, []byte(k))),
				"names are non-empty without '=' or NUL, values without NUL")
		}
	}
	return nil
}

func validateArgv(argv []string, ptr string, min int) error {
	if len(argv) < min || len(argv) > MaxCommandArgs {
		return fieldErr(ptr, "must have 1..4096 elements")
	}
	for i, a := range argv {
		if !isText(a) || i == 0 && a == "" {
			return fieldErr(ptr+"/"+strconv.Itoa(i), "elements are text without NUL; the first is non-empty")
		}
	}
	return nil
}

func (b *Bootstrap) validate() error {
	if !isPrintableASCII(b.Image, MaxImageReferenceBytes) || strings.IndexByte(b.Image, ' ') >= 0 {
		return fieldErr("/image", "must be 1..512 bytes of printable ASCII without spaces")
	}
	if b.Entrypoint != nil {
		if err := validateArgv(b.Entrypoint, "/entrypoint", 1); err != nil {
			return err
		}
	}
	if err := validateEnv(b.Env); err != nil {
		return err
	}
	if b.CPUMillis < 0 {
		return fieldErr("/cpu_millis", "must not be negative")
	}
	if b.MemoryBytes < 0 {
		return fieldErr("/memory_bytes", "must not be negative")
	}
	return nil
}

func (c *Command) validate() error {
	if err := validateArgv(c.Argv, "/argv", 1); err != nil {
		return err
	}
	if err := validateEnv(c.Env); err != nil {
		return err
	}
	if c.Cwd != "" && (c.Cwd[0] != '/' || !isText(c.Cwd)) {
		return fieldErr("/cwd", "must be an absolute path without NUL")
	}
	if c.TimeoutMS < MinTimeoutMS || c.TimeoutMS > MaxTimeoutMS {
		return fieldErr("/timeout_ms", "must be 1..120000")
	}
	if c.MaxOutputBytes < 1 || c.MaxOutputBytes > MaxCommandOutputBytes {
		return fieldErr("/max_output_bytes", "must be 1..33554432")
	}
	return nil
}

func (r *Response) validate() error {
	if err := first(
		uuidField(r.ID, "/id"),
		uuidField(r.ConnectionID, "/connection_id"),
	); err != nil {
		return err
	}
	if r.ErrorCode != "" && !IsCode(string(r.ErrorCode)) {
		return fieldErr("/error_code", "must be a code [a-z0-9_]{1,64}")
	}
	// At most one result member.
	var firstResult string
	for _, m := range r.results() {
		if !m.present {
			continue
		}
		if firstResult != "" {
			return newError(ErrResult, "/"+m.name, "a response carries at most one result member")
		}
		firstResult = m.name
	}
	switch {
	case r.ErrorCode == "":
		if r.Unsupported != nil {
			return newError(ErrResult, "/unsupported", "a success carries no unsupported evidence")
		}
	case r.ErrorCode == ErrUnsupported:
		if r.Unsupported == nil {
			return newError(ErrResult, "/unsupported", "an unsupported failure carries the unsupported evidence")
		}
		if firstResult != "" {
			return newError(ErrResult, "/"+firstResult, "an unsupported failure carries no result")
		}
	default:
		if r.Unsupported != nil {
			return newError(ErrResult, "/unsupported", "only an unsupported failure carries unsupported evidence")
		}
		if firstResult != "" && firstResult != "info" {
			return newError(ErrResult, "/"+firstResult, "a failure carries no result except an info receipt")
		}
	}
	if u := r.Unsupported; u != nil {
		if !u.Operation.Valid() {
			return fieldErr("/unsupported/operation", "must be one of the 15 operations")
		}
		if !isPrintableASCII(u.Reason, MaxUnsupportedReason) {
			return fieldErr("/unsupported/reason", "must be 1..256 bytes of printable ASCII")
		}
	}
	if r.Info != nil {
		if err := r.Info.validate(); err != nil {
			return under(err, "/info")
		}
	}
	if r.Command != nil {
		if err := r.Command.validate(); err != nil {
			return under(err, "/command")
		}
	}
	if r.Sample != nil {
		if err := r.Sample.validate(); err != nil {
			return under(err, "/sample")
		}
	}
	if r.Compute != nil {
		if err := r.Compute.validate(); err != nil {
			return under(err, "/compute")
		}
	}
	if r.State != nil {
		if err := r.State.validate(); err != nil {
			return under(err, "/state")
		}
	}
	return nil
}

func (i *Info) validate() error {
	if err := i.Reference.validate(); err != nil {
		return under(err, "/reference")
	}
	if err := positive(i.DeploymentGeneration, "/deployment_generation"); err != nil {
		return err
	}
	if !i.State.Valid() {
		return fieldErr("/state", "must be running, stopped or suspended")
	}
	if !isPrintableASCII(i.Image, MaxImageReferenceBytes) || strings.IndexByte(i.Image, ' ') >= 0 {
		return fieldErr("/image", "must be 1..512 bytes of printable ASCII without spaces")
	}
	if err := first(timeField(i.CreatedAt, "/created_at"), timeField(i.RenewedAt, "/renewed_at")); err != nil {
		return err
	}
	if i.RenewedAt.Before(i.CreatedAt) {
		return fieldErr("/renewed_at", "must not be before created_at")
	}
	return nil
}

func (c *CommandResult) validate() error {
	switch {
	case len(c.Stdout) > MaxCommandOutputBytes:
		return fieldErr("/stdout", "at most 32 MiB")
	case len(c.Stderr) > MaxCommandOutputBytes:
		return fieldErr("/stderr", "at most 32 MiB")
	case c.DurationMS < 0:
		return fieldErr("/duration_ms", "must not be negative")
	}
	return nil
}

func (s *Sample) validate() error {
	if err := timeField(s.ObservedAt, "/observed_at"); err != nil {
		return err
	}
	if !(s.CPUPercent >= 0) || math.IsInf(s.CPUPercent, 1) {
		return fieldErr("/cpu_percent", "must be a finite non-negative number")
	}
	return nil
}

func (c *Compute) validate() error {
	if err := positive(c.Generation, "/generation"); err != nil {
		return err
	}
	if !c.State.Valid() {
		return fieldErr("/state", "must be running, stopped or suspended")
	}
	return nil
}

func (s *State) validate() error {
	if !s.State.Valid() {
		return fieldErr("/state", "must be running, stopped or suspended")
	}
	if err := positive(s.Compute, "/compute"); err != nil {
		return err
	}
	if s.Snapshot != nil {
		if err := s.Snapshot.validate(); err != nil {
			return under(err, "/snapshot")
		}
	}
	return nil
}

func validateRetentionEntries(n int) error {
	if n < 1 || n > MaxRetentionEntries {
		return fieldErr("/entries", "must have 1..8 entries")
	}
	return nil
}

func entryErr(i int, member, detail string) error {
	return fieldErr("/entries/"+strconv.Itoa(i)+"/"+member, detail)
}

func (r *Retention) validate() error {
	if err := uuidField(r.ID, "/id"); err != nil {
		return err
	}
	if r.Sequence < 1 {
		return fieldErr("/sequence", "must be at least 1")
	}
	if err := first(
		uuidField(r.ConnectionID, "/connection_id"),
		positive(r.OwnerEpoch, "/owner_epoch"),
		validateRetentionEntries(len(r.Entries)),
	); err != nil {
		return err
	}
	return validateEntries(len(r.Entries), func(i int) (int64, string) {
		return r.Entries[i].Generation, r.Entries[i].SpecificationDigest
	})
}

// validateEntries checks the n entries of a retention or retention_ack,
// read through at: each a positive generation with a digest, one entry
// per generation.
func validateEntries(n int, at func(i int) (int64, string)) error {
	for i := range n {
		gen, digest := at(i)
		if err := validateEntry(i, gen, digest); err != nil {
			return err
		}
		for j := range i {
			if g, _ := at(j); g == gen {
				return entryErr(i, "generation", "one entry per generation")
			}
		}
	}
	return nil
}

func validateEntry(i int, gen int64, digest string) error {
	if gen <= 0 {
		return entryErr(i, "generation", "must be a positive 64-bit integer")
	}
	if !IsDigest(digest) {
		return entryErr(i, "specification_digest", "must be a lowercase hex SHA-256 digest")
	}
	return nil
}

func (a *RetentionAck) validate() error {
	if err := first(
		uuidField(a.ID, "/id"),
		uuidField(a.ConnectionID, "/connection_id"),
		validateRetentionEntries(len(a.Entries)),
	); err != nil {
		return err
	}
	return validateEntries(len(a.Entries), func(i int) (int64, string) {
		return a.Entries[i].Generation, a.Entries[i].SpecificationDigest
	})
}

// Answers reports whether a answers the pending retention r exactly: the
// same id and connection, and the same entries in the same order (spec
// "Generation control": any other acknowledgment deletes nothing).
func (a *RetentionAck) Answers(r *Retention) bool {
	if a == nil || r == nil || a.ID != r.ID || a.ConnectionID != r.ConnectionID || len(a.Entries) != len(r.Entries) {
		return false
	}
	for i, e := range a.Entries {
		if e.Generation != r.Entries[i].Generation || e.SpecificationDigest != r.Entries[i].SpecificationDigest {
			return false
		}
	}
	return true
}
