package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/harness"
)

// TestGzipWriteTooLarge: through the built gateway with
// max_decompressed_size 8MiB, both JS SDKs write a small gzip file (read
// back intact), and a 64 MiB write of zeros with gzip (a 64 KiB body) ends
// in the SDK's NotEnoughSpaceError whose message starts with
// WRITE_TOO_LARGE; the target file is not created.
func TestGzipWriteTooLarge(t *testing.T) {
	cf := strings.Replace(harness.DefaultCaddyfile, "home_dir /home/user", "home_dir /home/user\n\t\tmax_decompressed_size 8MiB", 1)
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = cf })
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			dir := "/home/user/gzip-" + pkg
			e.mkdir(dir)
			var res struct {
				Small        attempt
				SmallSameSha bool
				Large        attempt
			}
			e.runSDK(t, pkg, "gzipWrite", sbxOK, &res, "SCENARIO_DIR="+dir, "GZIP_BYTES="+strconv.Itoa(64<<20))
			if !res.Small.OK || !res.SmallSameSha {
				t.Fatalf("small gzip write: %+v, same sha %v", res.Small, res.SmallSameSha)
			}
			if res.Large.OK || res.Large.Error == nil || res.Large.Error.Name != "NotEnoughSpaceError" ||
				!strings.Contains(res.Large.Error.Message, "WRITE_TOO_LARGE: ") {
				t.Fatalf("large gzip write: %+v", res.Large)
			}
			if _, err := os.Stat(e.host(dir + "/large.bin")); !os.IsNotExist(err) {
				t.Fatalf("large.bin exists after the refused write: %v", err)
			}
		})
	}
}
