// Package genstate is the on-disk state of the deployment generations a
// node holds (spec node-protocol.md "Local retention and helper
// lifecycle", "Preparation and reclamation records"), under the node's
// state directory:
//
//	node/generations/<g>.lease           the lease (package lease), permanent
//	node/generations/<g>.lease-identity  the lease's identity record
//	node/generations/<g>.preparing       the preparation plan (Plan)
//	node/generations/<g>.json            the final provider configuration (Config), written once
//	node/generations/<g>.collecting      the reclamation journal (Journal)
//	node/generations/<g>.dropped         the digest-bound dropped marker (Dropped)
//	node/generations/<g>.d/              the generation's private version files
//	node/install.lock                    the installation lock (lease.LockInstallation)
//
// Every record is a small private JSON file (mode 0600, one link, owned by
// the node's user, never a symlink), decoded strictly, bounded to
// MaxRecord bytes, written atomically with fsync of the file and its
// directory; the final configuration is never replaced. Each record binds
// the installation, the generation and the specification digest, and a
// record that names anything else is refused (ErrMismatch).
package genstate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/lease"
)

// Schema is the version of every record (the "schema" member).
const Schema = 1

// MaxRecord bounds a record file, in bytes.
const MaxRecord = 64 << 10

// maxEntries bounds the entries of the generations directory a scan
// reads.
const maxEntries = 1 << 16

// Errors; every error of this package wraps one of them, a lease error
// (lease.ErrUnsafe, lease.ErrInvalid …) or an I/O error.
var (
	// ErrInvalid: a record is malformed (syntax, unknown, duplicate or
	// null members, a field out of its rule, too large).
	ErrInvalid = errors.New("genstate: malformed record")
	// ErrMismatch: a record binds another installation, generation or
	// specification digest.
	ErrMismatch = errors.New("genstate: record binds another installation, generation or specification")
)

// Binding is what every record binds: the installation, the generation
// and its specification digest.
type Binding struct {
	// InstallationID is the installation's lowercase UUID.
	InstallationID string `json:"installation_id"`
	// Generation is the deployment generation, > 0.
	Generation int64 `json:"generation"`
	// SpecificationDigest is the lowercase SHA-256 specification digest.
	SpecificationDigest string `json:"specification_digest"`
}

func (b Binding) valid() bool {
	return proto.IsUUID(b.InstallationID) && b.Generation > 0 && proto.IsDigest(b.SpecificationDigest)
}

// Want returns the binding as a lease.Want.
func (b Binding) Want() lease.Want {
	return lease.Want{InstallationID: b.InstallationID, Generation: b.Generation, SpecificationDigest: b.SpecificationDigest}
}

// Plan is the preparation journal <g>.preparing: written before the
// download with ImportStarted false, rewritten with ImportStarted true
// before the importer runs, removed once the final configuration is
// durable. It is a recovery and reclamation plan, never a provider.
type Plan struct {
	// Schema is Schema.
	Schema int `json:"schema"`
	Binding
	// Source is the release source the generation is prepared from.
	Source string `json:"source"`
	// Path is the generation's private version directory, relative to the
	// generations directory ("<g>.d").
	Path string `json:"path"`
	// ImportStarted is true once the importer (docker load) may have run.
	ImportStarted bool `json:"import_started"`
}

// File is one verified version file of a generation: the release's
// manifest.json or one of its artifacts.
type File struct {
	// Name is the file's name in the version directory.
	Name string `json:"name"`
	// Kind is manifest, image, seccomp or provider_spec.
	Kind string `json:"kind"`
	// SHA256 is the file's lowercase hex SHA-256.
	SHA256 string `json:"sha256"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
}

// Config is the final provider configuration <g>.json of a prepared
// generation, written once by a successful preparation. For Docker it
// holds the immutable local image ID the image was loaded as, and the
// provider spec of the release.
type Config struct {
	// Schema is Schema.
	Schema int `json:"schema"`
	Binding
	// Source is the release source.
	Source string `json:"source"`
	// Path is the private version directory ("<g>.d").
	Path string `json:"path"`
	// Provider is the provider type (docker).
	Provider proto.Provider `json:"provider"`
	// ImageRef is the image reference the release's tarball tags.
	ImageRef string `json:"image_ref"`
	// ImageID is the immutable local image ID ("sha256:" and 64 hex
	// digits) the tarball loaded as.
	ImageID string `json:"image_id"`
	// Command is the default entrypoint argv; empty means the image's.
	Command []string `json:"command,omitempty"`
	// Env are default environment variables.
	Env map[string]string `json:"env,omitempty"`
	// User is the container user; empty means the image's.
	User string `json:"user,omitempty"`
	// MemoryBytes is the default memory limit; 0 means none.
	MemoryBytes int64 `json:"memory_bytes,omitzero"`
	// NanoCPUs is the default CPU limit in 10⁻⁹ CPUs; 0 means none.
	NanoCPUs int64 `json:"nano_cpus,omitzero"`
	// NetworkMode replaces the node's docker_network for this generation
	// when set.
	NetworkMode string `json:"network_mode,omitempty"`
	// Seccomp names the seccomp profile among Files; empty means none.
	Seccomp string `json:"seccomp,omitempty"`
	// Files are the generation's version files with their checksums.
	Files []File `json:"files"`
	// Lease is the lease the configuration was published under: a second
	// witness, beside the lease's identity record, of which file the
	// lease is, so that a lease recreated with a matching record is
	// refused after a restart too (Inspect). Absent in configurations
	// published before it was recorded.
	Lease *LeaseFile `json:"lease,omitempty"`
}

// LeaseFile names a lease file by its device and inode numbers (stat
// st_dev, st_ino), as its identity record does.
type LeaseFile struct {
	// Device is the lease's device number.
	Device uint64 `json:"device"`
	// Inode is the lease's inode number.
	Inode uint64 `json:"inode"`
}

// File returns the version file called name and true, or false.
func (c *Config) File(name string) (File, bool) {
	for _, f := range c.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}

// Journal is the reclamation journal <g>.collecting, written before any
// version file is deleted.
type Journal struct {
	// Schema is Schema.
	Schema int `json:"schema"`
	Binding
	// NativeCleanupDone is true once native-layer cleanup is complete
	// (persisted before version files are deleted). Docker images are
	// never deleted, so for Docker it only records that step.
	NativeCleanupDone bool `json:"native_cleanup_done"`
}

// Dropped is the digest-bound marker <g>.dropped: the generation with this
// digest was reclaimed and must never be prepared or used again.
type Dropped struct {
	// Schema is Schema.
	Schema int `json:"schema"`
	Binding
}

// Record names the kind of a per-generation record file.
type Record string

// The records, by file suffix.
const (
	RecordPlan    Record = ".preparing"
	RecordConfig  Record = ".json"
	RecordJournal Record = ".collecting"
	RecordDropped Record = ".dropped"
)

// FilesSuffix is the suffix of a generation's version directory.
const FilesSuffix = ".d"

// Dir is the node's generations directory.
type Dir struct {
	path string
}

// Open returns the generations directory under stateDir
// (<stateDir>/node/generations), creating it (mode 0700) when missing, and
// checks it and its parent are private (lease.ErrUnsafe otherwise).
func Open(stateDir string) (*Dir, error) {
	node := filepath.Join(stateDir, "node")
	path := filepath.Join(node, "generations")
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("genstate: %w", err)
	}
	for _, p := range []string{node, path} {
		if err := lease.CheckDir(p); err != nil {
			return nil, err
		}
	}
	return &Dir{path: path}, nil
}

// Path returns the directory's path.
func (d *Dir) Path() string { return d.path }

// InstallLockPath returns the installation lock's path
// (<stateDir>/node/install.lock).
func (d *Dir) InstallLockPath() string {
	return filepath.Join(filepath.Dir(d.path), "install.lock")
}

// RecordPath returns the path of generation g's record r.
func (d *Dir) RecordPath(g int64, r Record) string {
	return filepath.Join(d.path, strconv.FormatInt(g, 10)+string(r))
}

// FilesName returns the name of generation g's version directory, relative
// to the generations directory.
func FilesName(g int64) string { return strconv.FormatInt(g, 10) + FilesSuffix }

// FilesPath returns generation g's version directory.
func (d *Dir) FilesPath(g int64) string { return filepath.Join(d.path, FilesName(g)) }

// Generations returns every generation that has a lease, a record or a
// version directory, ascending. Temporary files and unknown names are
// ignored.
func (d *Dir) Generations() ([]int64, error) {
	f, err := os.Open(d.path)
	if err != nil {
		return nil, fmt.Errorf("genstate: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(maxEntries)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("genstate: %w", err)
	}
	seen := map[int64]bool{}
	for _, n := range names {
		num, _, ok := strings.Cut(n, ".")
		if !ok {
			continue
		}
		g, err := strconv.ParseInt(num, 10, 64)
		if err != nil || g <= 0 || strconv.FormatInt(g, 10) != num {
			continue
		}
		switch strings.TrimPrefix(n, num) {
		case ".lease", ".lease-identity", string(RecordPlan), string(RecordConfig), string(RecordJournal), string(RecordDropped), FilesSuffix:
			seen[g] = true
		}
	}
	out := make([]int64, 0, len(seen))
	for g := range seen {
		out = append(out, g)
	}
	slices.Sort(out)
	return out, nil
}

// Local is what generation g has on disk. A nil record with a nil error
// is absent; a non-nil error means the record exists but is refused
// (unsafe, malformed or bound to something else).
type Local struct {
	// Generation is g.
	Generation int64
	// Lease reports whether the lease file exists (as any kind of file).
	Lease bool
	// Identity is the lease's identity record.
	Identity    *lease.Identity
	IdentityErr error
	// Plan is the preparation plan.
	Plan    *Plan
	PlanErr error
	// Config is the final provider configuration.
	Config    *Config
	ConfigErr error
	// Journal is the reclamation journal.
	Journal    *Journal
	JournalErr error
	// Dropped is the dropped marker.
	Dropped    *Dropped
	DroppedErr error
}

// Binding returns the best-known binding of the generation: the identity
// record's, else the plan's, config's, journal's or dropped marker's; and
// false when none is readable.
func (l *Local) Binding() (Binding, bool) {
	switch {
	case l.Identity != nil:
		return Binding{InstallationID: l.Identity.InstallationID, Generation: l.Identity.Generation, SpecificationDigest: l.Identity.SpecificationDigest}, true
	case l.Plan != nil:
		return l.Plan.Binding, true
	case l.Config != nil:
		return l.Config.Binding, true
	case l.Journal != nil:
		return l.Journal.Binding, true
	case l.Dropped != nil:
		return l.Dropped.Binding, true
	}
	return Binding{}, false
}

// Inspect reads everything generation g has on disk; it never writes.
func (d *Dir) Inspect(g int64) Local {
	l := Local{Generation: g}
	if _, err := os.Lstat(lease.Path(d.path, g)); err == nil {
		l.Lease = true
	}
	if id, err := lease.ReadIdentity(d.path, g); err == nil {
		l.Identity = &id
		// The lease itself must still be the file the record names.
		if l.Lease {
			l.IdentityErr = lease.Check(d.path, id)
		}
	} else if !errors.Is(err, lease.ErrIdentityMissing) {
		l.IdentityErr = err
	}
	absent := func(err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	l.Plan, l.PlanErr = d.ReadPlan(g)
	l.PlanErr = absent(l.PlanErr)
	l.Config, l.ConfigErr = d.ReadConfig(g)
	l.ConfigErr = absent(l.ConfigErr)
	l.Journal, l.JournalErr = d.ReadJournal(g)
	l.JournalErr = absent(l.JournalErr)
	l.Dropped, l.DroppedErr = d.ReadDropped(g)
	l.DroppedErr = absent(l.DroppedErr)
	// The configuration's witness: the identity record (and so the lease)
	// must name the lease the configuration was published under.
	if c, id := l.Config, l.Identity; c != nil && c.Lease != nil && id != nil && l.IdentityErr == nil &&
		(c.Lease.Device != id.Device || c.Lease.Inode != id.Inode) {
		l.IdentityErr = fmt.Errorf("%w: generation %d's lease is not the one its configuration was published under", lease.ErrReplaced, g)
	}
	return l
}

// read reads generation g's record r into v and checks its binding
// against want (when want.Generation > 0) or at least its generation. A
// missing record is an error for which errors.Is(err, fs.ErrNotExist)
// holds.
func (d *Dir) read(g int64, r Record, v interface{ binding() *Binding }, required ...string) error {
	path := d.RecordPath(g, r)
	b, err := lease.ReadPrivate(path, MaxRecord)
	if err != nil {
		return err
	}
	schema := strictjson.Schema{Required: map[string][]string{
		"":         append([]string{"schema", "installation_id", "generation", "specification_digest"}, required...),
		"/files/-": {"name", "kind", "sha256", "size"},
		"/lease":   {"device", "inode"},
	}}
	if err := strictjson.Decode(b, v, schema); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, filepath.Base(path), err)
	}
	bd := v.binding()
	if !bd.valid() {
		return fmt.Errorf("%w: %s: installation_id, generation or specification_digest out of its rule", ErrInvalid, filepath.Base(path))
	}
	if bd.Generation != g {
		return fmt.Errorf("%w: %s names generation %d", ErrMismatch, filepath.Base(path), bd.Generation)
	}
	return nil
}

func (p *Plan) binding() *Binding    { return &p.Binding }
func (c *Config) binding() *Binding  { return &c.Binding }
func (j *Journal) binding() *Binding { return &j.Binding }
func (x *Dropped) binding() *Binding { return &x.Binding }

// Check returns ErrMismatch unless b equals want.
func (b Binding) Check(want Binding) error {
	if b != want {
		return ErrMismatch
	}
	return nil
}

// ReadPlan reads generation g's preparation plan.
func (d *Dir) ReadPlan(g int64) (*Plan, error) {
	var p Plan
	if err := d.read(g, RecordPlan, &p, "source", "path", "import_started"); err != nil {
		return nil, err
	}
	if p.Schema != Schema || p.Path != FilesName(g) || p.Source == "" {
		return nil, fmt.Errorf("%w: %s: schema, source or path out of its rule", ErrInvalid, filepath.Base(d.RecordPath(g, RecordPlan)))
	}
	return &p, nil
}

// WritePlan persists p as generation p.Generation's plan (atomically,
// replacing an earlier plan).
func (d *Dir) WritePlan(p *Plan) error {
	p.Schema = Schema
	return d.write(p.Generation, RecordPlan, p, false)
}

// ReadConfig reads generation g's final provider configuration.
func (d *Dir) ReadConfig(g int64) (*Config, error) {
	var c Config
	if err := d.read(g, RecordConfig, &c, "source", "path", "provider", "image_ref", "image_id", "files"); err != nil {
		return nil, err
	}
	if err := c.validate(g); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, filepath.Base(d.RecordPath(g, RecordConfig)), err)
	}
	return &c, nil
}

func (c *Config) validate(g int64) error {
	switch {
	case c.Schema != Schema:
		return errors.New("schema")
	case c.Path != FilesName(g) || c.Source == "":
		return errors.New("source or path")
	case c.Provider != proto.ProviderDocker:
		return errors.New("provider")
	case c.ImageRef == "" || !IsImageID(c.ImageID):
		return errors.New("image_ref or image_id")
	case len(c.Files) == 0:
		return errors.New("files")
	}
	for _, f := range c.Files {
		if !safeName(f.Name) || !proto.IsDigest(f.SHA256) || f.Size < 0 {
			return errors.New("files")
		}
	}
	if c.Seccomp != "" {
		if f, ok := c.File(c.Seccomp); !ok || f.Kind != "seccomp" {
			return errors.New("seccomp")
		}
	}
	return nil
}

// PublishConfig writes generation c.Generation's final configuration once:
// an existing one is never replaced (an error for which
// errors.Is(err, fs.ErrExist) holds).
func (d *Dir) PublishConfig(c *Config) error {
	c.Schema = Schema
	if err := c.validate(c.Generation); err != nil {
		return fmt.Errorf("%w: config: %v", ErrInvalid, err)
	}
	return d.write(c.Generation, RecordConfig, c, true)
}

// ReadJournal reads generation g's reclamation journal.
func (d *Dir) ReadJournal(g int64) (*Journal, error) {
	var j Journal
	if err := d.read(g, RecordJournal, &j, "native_cleanup_done"); err != nil {
		return nil, err
	}
	if j.Schema != Schema {
		return nil, fmt.Errorf("%w: %s: schema", ErrInvalid, filepath.Base(d.RecordPath(g, RecordJournal)))
	}
	return &j, nil
}

// WriteJournal persists j as generation j.Generation's reclamation
// journal.
func (d *Dir) WriteJournal(j *Journal) error {
	j.Schema = Schema
	return d.write(j.Generation, RecordJournal, j, false)
}

// ReadDropped reads generation g's dropped marker.
func (d *Dir) ReadDropped(g int64) (*Dropped, error) {
	var x Dropped
	if err := d.read(g, RecordDropped, &x); err != nil {
		return nil, err
	}
	if x.Schema != Schema {
		return nil, fmt.Errorf("%w: %s: schema", ErrInvalid, filepath.Base(d.RecordPath(g, RecordDropped)))
	}
	return &x, nil
}

// WriteDropped persists generation x.Generation's dropped marker, once.
func (d *Dir) WriteDropped(x *Dropped) error {
	x.Schema = Schema
	return d.write(x.Generation, RecordDropped, x, true)
}

// Exists reports whether generation g's record r exists (as any kind of
// file: a symlink counts, so that it is refused rather than ignored).
func (d *Dir) Exists(g int64, r Record) (bool, error) {
	_, err := os.Lstat(d.RecordPath(g, r))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("genstate: %w", err)
}

// Remove deletes generation g's record r and fsyncs the directory; a
// missing record is not an error.
func (d *Dir) Remove(g int64, r Record) error {
	err := os.Remove(d.RecordPath(g, r))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("genstate: %w", err)
	}
	return lease.SyncDir(d.path)
}

func (d *Dir) write(g int64, r Record, v interface{ binding() *Binding }, once bool) error {
	if !v.binding().valid() || v.binding().Generation != g {
		return fmt.Errorf("%w: binding out of its rule", ErrInvalid)
	}
	b, err := strictjson.Encode(v)
	if err != nil {
		return err
	}
	if len(b) > MaxRecord {
		return fmt.Errorf("%w: record larger than %d bytes", ErrInvalid, MaxRecord)
	}
	path := d.RecordPath(g, r)
	if once {
		return lease.WriteOnce(path, b)
	}
	return lease.WriteAtomic(path, b)
}

// IsImageID reports whether s is a local image ID: "sha256:" and 64
// lowercase hex digits.
func IsImageID(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	return ok && proto.IsDigest(h)
}

// safeName reports whether s is a plain file name of [A-Za-z0-9._-] that
// does not start with a dot.
func safeName(s string) bool {
	if s == "" || len(s) > 128 || s[0] == '.' {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
