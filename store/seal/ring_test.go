package seal_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/seed43327c4c/idempotency/store/seal"
)

// secret returns a key of KeySize bytes of b.
func secret(b byte) []byte { return bytes.Repeat([]byte{b}, seal.KeySize) }

func line(id string, b byte) string {
	return id + " " + base64.StdEncoding.EncodeToString(secret(b)) + "\n"
}

func TestParseRing(t *testing.T) {
	t.Run("first line is current", func(t *testing.T) {
		ring, err := seal.ParseRing(strings.NewReader("# keys\n\n" + line("k2", 2) + "  " + line("k1", 1)))
		if err != nil {
			t.Fatal(err)
		}
		if ring.Current() != "k2" || !ring.Has("k1") || !ring.Has("k2") || ring.Has("k3") {
			t.Fatalf("current %q, has k1 %v, k2 %v, k3 %v", ring.Current(), ring.Has("k1"), ring.Has("k2"), ring.Has("k3"))
		}
	})
	short := base64.StdEncoding.EncodeToString(secret(1)[:16])
	for _, tc := range []struct{ name, src, want string }{
		{"empty", "", "has none"},
		{"only comments", "# nothing\n\n", "has none"},
		{"one field", "k1\n", "line 1: want \"ID BASE64\""},
		{"three fields", line("k1", 1)[:len(line("k1", 1))-1] + " x\n", "line 1: want \"ID BASE64\""},
		{"not base64", "k1 !!!\n", "line 1: key \"k1\" is not standard base64"},
		{"wrong length", "k1 " + short + "\n", "key \"k1\" is 16 bytes, want 32"},
		{"duplicate id", line("k1", 1) + line("k1", 2), "key id \"k1\" is in the ring twice"},
		{"bad id", line("k/1", 1), "key id \"k/1\""},
		{"bad line after good", line("k1", 1) + "\nk2\n", "line 3:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring, err := seal.ParseRing(strings.NewReader(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseRing = %v, %v; want an error with %q", ring, err, tc.want)
			}
		})
	}
}

func TestNewRing(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []seal.Key
		want string
	}{
		{"no keys", nil, "has none"},
		{"nil secret", []seal.Key{{ID: "k1"}}, "is 0 bytes"},
		{"long id", []seal.Key{{ID: strings.Repeat("k", 65), Secret: secret(1)}}, "want 1 to 64"},
		{"empty id", []seal.Key{{ID: "", Secret: secret(1)}}, "want 1 to 64"},
		{"duplicate", []seal.Key{{ID: "a", Secret: secret(1)}, {ID: "a", Secret: secret(1)}}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := seal.NewRing(tc.keys...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewRing = %v; want an error with %q", err, tc.want)
			}
		})
	}
}
