package credential

import (
	"bytes"
	"fmt"
	"testing"
)

// credentialFile returns a credential file of n credentials, JSON or YAML.
func credentialFile(format string, n int) []byte {
	var b bytes.Buffer
	if format == "json" {
		b.WriteString(`{"credentials": [`)
	} else {
		b.WriteString("credentials:\n")
	}
	for i := range n {
		if format == "json" {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "\n  {\"id\": \"cred-%08d\", \"enabled\": true, \"resourceSpecId\": \"spec-small\", \"resourceGroupId\": \"group-%04d\", \"projectNamespace\": \"team-%03d\", \"clusterId\": \"cluster-a\"}", i, i%1000, i%500)
		} else {
			fmt.Fprintf(&b, "  - id: cred-%08d\n    enabled: true\n    resourceSpecId: spec-small\n    resourceGroupId: group-%04d\n    projectNamespace: team-%03d\n    clusterId: cluster-a\n", i, i%1000, i%500)
		}
	}
	if format == "json" {
		b.WriteString("\n]}\n")
	}
	return b.Bytes()
}

// BenchmarkParse parses a 15 MiB credential file (about 95,000 JSON or
// 99,000 YAML credentials), as every reload does; B/op is what one parse
// allocates in all.
func BenchmarkParse(b *testing.B) {
	for _, format := range []string{"json", "yaml"} {
		one := len(credentialFile(format, 2)) - len(credentialFile(format, 1))
		data := credentialFile(format, (15<<20)/one)
		b.Run(format, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
