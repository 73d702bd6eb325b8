package idempotency_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

func TestKeyFromJSONField(t *testing.T) {
	const fail = "\x00error" // the case wants an error
	for _, tc := range []struct {
		name, body, key string
	}{
		{"string", `{"id":"evt_1","type":"charge.succeeded"}`, "evt_1"},
		{"after nested members named alike", `{"data":{"id":"inner","list":[{"id":"x"}]},"id":"evt_2"}`, "evt_2"},
		{"brackets and quotes in strings", `{"data":"}{][\"\\","id":"k"}`, "k"},
		{"escapes decoded", `{"id":"evt_\u0041\"b\/"}`, `evt_A"b/`},
		{"escaped name", `{"\u0069d":"k"}`, "k"},
		{"space everywhere", " \n{ \"a\" : [ 1 , 2 ] ,\t\"id\" : \"k\" } \r\n", "k"},
		{"non-ASCII kept for the caller to judge", `{"id":"clé"}`, "clé"},
		{"integer as sent", `{"id":42}`, "42"},
		{"number as sent", `{"id":-1.50e3}`, "-1.50e3"},
		{"absent", `{"type":"x"}`, ""},
		{"only nested", `{"data":{"id":"inner"}}`, ""},
		{"null", `{"id":null}`, ""},
		{"empty string", `{"id":""}`, fail},
		{"empty object", `{}`, ""},
		{"empty body", ``, fail},
		{"not JSON", `id=evt_1`, fail},
		{"array", `[{"id":"k"}]`, fail},
		{"string body", `"k"`, fail},
		{"bool", `{"id":true}`, fail},
		{"object", `{"id":{"v":"k"}}`, fail},
		{"array value", `{"id":["k"]}`, fail},
		{"leading zero", `{"id":01}`, fail},
		{"bad escape", `{"id":"a\x"}`, fail},
		{"named twice", `{"id":"a","id":"b"}`, fail},
		{"named twice in two cases", `{"id":"a","Id":"b"}`, fail},
		{"only in another case", `{"ID":"a"}`, fail},
		{"kelvin sign folds to k", `{"i\u212a":"a","ik":"b"}`, fail},
		{"trailing data", `{"id":"a"} x`, fail},
		{"trailing comma", `{"id":"a",}`, fail},
		{"unterminated", `{"id":"a"`, fail},
		{"unterminated nested", `{"data":{"id":"a"`, fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			field := "id"
			if strings.Contains(tc.name, "kelvin") {
				field = "ik"
			}
			key, err := idempotency.KeyFromJSONField(field)(nil, []byte(tc.body))
			if tc.key == fail {
				require.Error(t, err)
				require.Empty(t, key)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.key, key)
		})
	}
}

// FuzzKeyFromJSONField compares the scanner with encoding/json on every
// valid JSON text: the same member, decoded the same way.
func FuzzKeyFromJSONField(f *testing.F) {
	for _, seed := range []string{
		`{"id":"evt_1"}`, `{"data":{"id":"x"},"id":"k"}`, `{"id":42}`, `{"id":null}`, `{"ID":"a"}`,
		`{"id":"a","id":"b"}`, `{"\u0069d":"\ud83d\ude00"}`, `{"id":"\u00e9"}`, `[1]`, `{"id":"a"} x`, `{`,
		`{"a":"}","id":"\""}`, `{"id":"\xff"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		key, err := idempotency.KeyFromJSONField("id")(nil, []byte(body))
		if err != nil {
			require.Empty(t, key)
		}
		if !json.Valid([]byte(body)) {
			return // the handler refuses it; the scanner must only not panic
		}
		wantKey, wantErr := jsonReference(body, "id")
		require.Equal(t, wantErr, err != nil, "error %v for %q", err, body)
		require.Equal(t, wantKey, key, "body %q", body)
	})
}

// jsonReference finds member name of the valid JSON text body with
// encoding/json, by KeyFromJSONField's rules.
func jsonReference(body, name string) (key string, isErr bool) {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return "", true
	}
	var matches []json.RawMessage
	for dec.More() {
		tok, _ := dec.Token()
		var value json.RawMessage
		_ = dec.Decode(&value)
		if member := tok.(string); strings.EqualFold(member, name) {
			if member != name {
				return "", true
			}
			matches = append(matches, value)
		}
	}
	switch {
	case len(matches) > 1:
		return "", true
	case len(matches) == 0 || string(matches[0]) == "null":
		return "", false
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(matches[0]))
	d.UseNumber()
	_ = d.Decode(&v)
	switch v := v.(type) {
	case string:
		return v, v == ""
	case json.Number:
		return string(matches[0]), false
	}
	return "", true
}

// BenchmarkKeyFromJSONField reads the id of a webhook event with a large
// data member, beside decoding it with encoding/json.
func BenchmarkKeyFromJSONField(b *testing.B) {
	data := `{"object":{"lines":[` + strings.Repeat(`{"id":"li_1","amount":100,"description":"a \"line\""},`, 1000) + `{}]}}`
	body := []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"invoice.paid","data":` + data + `}`)
	b.Run("KeyFromJSONField", func(b *testing.B) {
		key := idempotency.KeyFromJSONField("id")
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := key(nil, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var event struct{ ID string }
			if err := json.Unmarshal(body, &event); err != nil {
				b.Fatal(err)
			}
		}
	})
}
