package proto

import "testing"

func BenchmarkDecodeHeartbeat(b *testing.B) {
	data := mustEncode(b, exHeartbeat())
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	data := mustEncode(b, exRequest(OpCommandCompute))
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeHeartbeat(b *testing.B) {
	f := exHeartbeat()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(f); err != nil {
			b.Fatal(err)
		}
	}
}
