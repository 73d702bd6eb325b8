package canonjson

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestCanonicalJSONForms: bodies that decode to one value without loss get
// one canonical form; bodies that decoding would change (a member named
// twice, spelled alike or escaped differently; U+FFFD from any source)
// and bodies that are not exactly one JSON value are left as they are.
func TestCanonicalJSONForms(t *testing.T) {
	for body, want := range map[string]string{
		`{ "b" : [1, {"d":2, "c":"x:y"}], "a" : "q\"uote:" }`: `{"a":"q\"uote:","b":[1,{"c":"x:y","d":2}]}`,
		`[]`:                  `[]`,
		`{}`:                  `{}`,
		` [ {} , [ ] ] `:      `[{},[]]`,
		`-0`:                  `-0`,
		`1e999`:               `1e999`,
		`"\ud83d\ude00"`:      `"😀"`,
		`{"a":1,"\u0061":2}`:  `{"a":1,"\u0061":2}`,
		`{"a":{"b":1,"b":1}}`: `{"a":{"b":1,"b":1}}`,
		`{"a":"\ufffd"}`:      `{"a":"\ufffd"}`,
		`{"\ud800":1}`:        `{"\ud800":1}`,
		`{"a":1}{"a":1}`:      `{"a":1}{"a":1}`,
		`{"a":1`:              `{"a":1`,
		``:                    ``,
	} {
		require.Equal(t, want, string(Canonical([]byte(body))), "body %q", body)
	}
}

// TestCanonicalJSONNamesAlikeButForCase: an object with two names equal
// under case folding (escapes decoded, at any depth) is left as it is;
// names that differ otherwise, a prefix say, are sorted as ever.
func TestCanonicalJSONNamesAlikeButForCase(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"capitals", `{"amount":5,"AMOUNT":7000}`, `{"amount":5,"AMOUNT":7000}`},
		{"one capital, spaced", `{ "Amount" : 5 , "amount" : 7000 }`, `{ "Amount" : 5 , "amount" : 7000 }`},
		{"Kelvin sign", "{\"k\":1,\"\u212a\":2}", "{\"k\":1,\"\u212a\":2}"},
		{"Kelvin sign and capital K", "{\"\u212a\":1,\"K\":2}", "{\"\u212a\":1,\"K\":2}"},
		{"long s", "{\"s\":1,\"\u017f\":2}", "{\"s\":1,\"\u017f\":2}"},
		{"long s, escaped", `{"\u017fum":1,"SUM":2}`, `{"\u017fum":1,"SUM":2}`},
		{"escaped capital", `{"\u0041mount":1,"amount":2}`, `{"\u0041mount":1,"amount":2}`},
		{"non-ASCII letters", `{"\u00e9t\u00e9":1,"\u00c9T\u00c9":2}`, `{"\u00e9t\u00e9":1,"\u00c9T\u00c9":2}`},
		{"three-way fold", "{\"\u03c3\":1,\"\u03c2\":2}", "{\"\u03c3\":1,\"\u03c2\":2}"},
		{"apart after sorting", `{"AMOUNT":1,"B":2,"amount":3}`, `{"AMOUNT":1,"B":2,"amount":3}`},
		{"nested", `{"z":[{"id":1,"ID":2}],"a":0}`, `{"z":[{"id":1,"ID":2}],"a":0}`},
		{"sibling objects", `{"b":{"id":1},"a":{"ID":2}}`, `{"a":{"ID":2},"b":{"id":1}}`},
		{"shared prefix", `{"amountMinor":1,"AMOUNT":2,"amount2":3}`, `{"AMOUNT":2,"amount2":3,"amountMinor":1}`},
		{"dotted capital I, which only Turkish folds to i", `{"\u0130":2, "i":1}`, "{\"i\":1,\"\u0130\":2}"},
		{"ordinary object", `{"b":1,"a":{"y":2,"x":3}}`, `{"a":{"x":3,"y":2},"b":1}`},
		{"camelCase", `{"currencyCode":"EUR","amountMinor":1}`, `{"amountMinor":1,"currencyCode":"EUR"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, string(Canonical([]byte(c.body))))
			require.Equal(t, string(encodingJSONCanonical([]byte(c.body))), c.want, "the reference agrees")
		})
	}
}

// TestCanonicalJSONFoldsEveryCaseVariant: for every character, and every
// other it equals under simple case folding (each pair strings.EqualFold
// and so encoding/json holds alike), an object naming both is left as it
// is.
func TestCanonicalJSONFoldsEveryCaseVariant(t *testing.T) {
	pairs := 0
	for c := rune(0); c <= unicode.MaxRune; c++ {
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			require.True(t, strings.EqualFold(string(c), string(f)))
			body := []byte(`{"` + string(c) + `":0,"` + string(f) + `":1}`)
			require.Equal(t, string(body), string(Canonical(body)), "%U and %U", c, f)
			pairs++
		}
	}
	require.Greater(t, pairs, 2000)
}

// TestEncodingJSONMatchesNamesByFolding pins what the rule above stands
// on: encoding/json reads a member into a struct field whose name equals
// the member's under case folding, escapes decoded.
func TestEncodingJSONMatchesNamesByFolding(t *testing.T) {
	for _, c := range []struct{ field, member string }{
		{"amount", `"AMOUNT"`}, {"amount", `"\u0041mount"`}, {"k", "\"\u212a\""}, {"K", "\"\u212a\""},
		{"s", "\"\u017f\""}, {"sum", `"\u017fUM"`},
	} {
		v := reflect.New(reflect.StructOf([]reflect.StructField{
			{Name: "F", Type: reflect.TypeFor[int](), Tag: reflect.StructTag(`json:"` + c.field + `"`)},
		}))
		require.NoError(t, json.Unmarshal([]byte(`{`+c.member+`:7}`), v.Interface()))
		require.Equal(t, 7, int(v.Elem().Field(0).Int()), "%s read into the field %q", c.member, c.field)
	}
}

// TestCanonicalJSONRefusesDeepBodiesCheaply: a body nested deeper than the
// JSON decoder accepts is left as it is after the decoder gives up, which
// it does early, without reading the whole body into memory.
func TestCanonicalJSONRefusesDeepBodiesCheaply(t *testing.T) {
	const depth = 200_000
	body := append(bytes.Repeat([]byte(`{"a":`), depth), bytes.Repeat([]byte(`}`), depth)...)
	require.Equal(t, body, Canonical(body))
	allocs := testing.AllocsPerRun(3, func() { Canonical(body) })
	require.Less(t, allocs, 1000.0, "allocations to refuse a body nested %d deep", depth)
}

// encodingJSONCanonical is the canonical form as encoding/json gives it,
// which Canonical must match byte for byte (stored fingerprints depend
// on it): the body decoded whole, numbers as json.Number, and encoded
// again; or the body unchanged if it is not exactly one JSON value or
// decoding would not keep it whole (a member named twice, so the decoded
// objects hold fewer members than the body has name separators; two names
// of one object equal under case folding; or U+FFFD in a decoded string
// or name).
func encodingJSONCanonical(body []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return body
	}
	if _, err := dec.Token(); err != io.EOF {
		return body
	}
	members, ok := decodedMembers(v)
	if !ok || members != nameSeparators(body) {
		return body
	}
	canonical, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return canonical
}

// decodedMembers counts the object members in v at every depth, and
// reports false if a string or name in v holds U+FFFD or two names of one
// object are equal under case folding.
func decodedMembers(v any) (int, bool) {
	n, ok := 0, true
	switch v := v.(type) {
	case map[string]any:
		folded := make(map[string]bool, len(v))
		for name, member := range v {
			m, memberOK := decodedMembers(member)
			n, ok = n+1+m, ok && memberOK && !strings.ContainsRune(name, utf8.RuneError) && !folded[foldCase(name)]
			folded[foldCase(name)] = true
		}
	case []any:
		for _, element := range v {
			m, elementOK := decodedMembers(element)
			n, ok = n+m, ok && elementOK
		}
	case string:
		ok = !strings.ContainsRune(v, utf8.RuneError)
	}
	return n, ok
}

// foldCase returns s with every character replaced by the least of those
// unicode.SimpleFold cycles through from it, so that foldCase(s) equals
// foldCase(t) if and only if strings.EqualFold(s, t).
func foldCase(s string) string {
	folded := []rune(s)
	for i, c := range folded {
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			folded[i] = min(folded[i], f)
		}
	}
	return string(folded)
}

// nameSeparators counts the colons outside strings in body, valid JSON.
func nameSeparators(body []byte) int {
	n, inString, escaped := 0, false, false
	for _, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case c == ':' && !inString:
			n++
		}
	}
	return n
}

// canonicalSeeds are bodies at the edges of what Canonical accepts.
var canonicalSeeds = []string{
	`{ "b" : [1, {"d":2, "c":"x:y"}], "a" : "q\"uote:" }`, `[]`, `{}`, ` [ {} , [ ] ] `,
	`-0`, `1e999`, `0.5E-3`, `1E+2`, `01`, `1.`, `.5`, `-`, `1e`, `+1`, `[1,]`, `{"a":1,}`,
	`"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83d\u0041"`, `"\ud83dx"`, `"\uD83D\uDE00"`,
	`{"a":1,"\u0061":2}`, `{"a":{"b":1,"b":1}}`, `{"a":"\ufffd"}`, `{"\ud800":1}`, "\"\xff\"",
	"\"\xed\xa0\x80\"", "\"\xef\xbf\xbd\"", `{"a":1}{"a":1}`, `{"a":1}  `, `{"a":1} x`, `{"a":1`,
	``, ` `, `true`, `tru`, `nul`, `null `, `[true,false,null]`, `"<>&\u2028\u2029"`,
	"\"\u2028\u2029\"", `"\b\f\n\r\t\/\\\"\u0000\u001f\u007f"`, "\"\x7f\"", "\"a\tb\"", "\"\x1f\"", "\"\x00\"", `"\x"`,
	`{"é":1,"e":2,"z":3,"É":4}`, `{"é":1,"e":2,"z":3,"Ë":4}`, `{"b":{"d":[{"f":1,"e":2}],"c":3},"a":4}`, "\ufeff{}", `{"":0}`,
	`{"a" 1}`, `{1:2}`, `[1 2]`, `"\u12"`, `"\u12G4"`,
	`{"amount":5,"AMOUNT":7000}`, "{\"k\":1,\"\u212a\":2}", "{\"s\":1,\"\u017f\":2}", `{"\u0041mount":1,"amount":2}`,
	`{"a":{"B":1,"b":2}}`, `{"ab":1,"AbC":2}`, "{\"i\":1,\"\u0130\":2}", `{"\u03c3":1,"\u03a3":2,"\u03c2":3}`,
}

// TestCanonicalJSONMatchesEncodingJSON: on every seed, and on thousands of
// generated bodies (valid JSON with random spacing, escapes, names named
// twice, numbers in every form), Canonical gives what encoding/json
// gives.
func TestCanonicalJSONMatchesEncodingJSON(t *testing.T) {
	for _, body := range canonicalSeeds {
		require.Equal(t, string(encodingJSONCanonical([]byte(body))), string(Canonical([]byte(body))), "body %q", body)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		body := randomJSON(rng, nil, 0)
		require.Equal(t, string(encodingJSONCanonical(body)), string(Canonical(body)), "body %q", body)
	}
}

// TestCanonicalJSONDepthLimit: encoding/json decodes 10000 levels of
// nesting and not 10001, and so does Canonical.
func TestCanonicalJSONDepthLimit(t *testing.T) {
	for _, depth := range []int{maxJSONDepth, maxJSONDepth + 1} {
		for open, close := range map[string]string{`[ `: ` ]`, `{"a": `: `}`} {
			body := []byte(strings.Repeat(open, depth) + "0" + strings.Repeat(close, depth))
			want := encodingJSONCanonical(body)
			accepted := !bytes.Equal(want, body) // the spaces go
			require.Equal(t, depth == maxJSONDepth, accepted, "encoding/json accepts %q nested %d deep", open, depth)
			require.Equal(t, string(want), string(Canonical(body)), "%q nested %d deep", open, depth)
		}
	}
}

// FuzzCanonicalJSON: on any body, Canonical gives what encoding/json
// gives.
func FuzzCanonicalJSON(f *testing.F) {
	for _, body := range canonicalSeeds {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want := encodingJSONCanonical(body)
		if got := Canonical(body); !bytes.Equal(got, want) {
			t.Fatalf("body %q: got %q, encoding/json gives %q", body, got, want)
		}
	})
}

// randomJSON appends a random JSON value, nested at most five deep, to
// buf: mostly valid, spaced at random, with names that collide now and
// then, escapes of every kind, and numbers in every form.
func randomJSON(rng *rand.Rand, buf []byte, depth int) []byte {
	space := func() {
		for rng.IntN(3) == 0 {
			buf = append(buf, " \t\n\r"[rng.IntN(4)])
		}
	}
	space()
	switch kind := rng.IntN(6); {
	case kind == 0 && depth < 5:
		buf = append(buf, '{')
		for i := range rng.IntN(5) {
			if i > 0 {
				buf = append(buf, ',')
			}
			space()
			buf = randomJSONString(rng, buf, true)
			space()
			buf = append(buf, ':')
			buf = randomJSON(rng, buf, depth+1)
		}
		space()
		buf = append(buf, '}')
	case kind == 1 && depth < 5:
		buf = append(buf, '[')
		for i := range rng.IntN(5) {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = randomJSON(rng, buf, depth+1)
		}
		space()
		buf = append(buf, ']')
	case kind == 2:
		buf = randomJSONString(rng, buf, false)
	case kind == 3:
		buf = append(buf, []string{"true", "false", "null"}[rng.IntN(3)]...)
	default:
		numbers := []string{"0", "-0", "12", "-3.25", "1e9", "2E-7", "6.02e+23", "1e400", "123456789012345678901234567890"}
		buf = append(buf, numbers[rng.IntN(len(numbers))]...)
	}
	space()
	return buf
}

// randomJSONString appends a random JSON string to buf; a name is drawn
// from few letters, so that names collide, exactly or but for case, some
// of them escaped.
func randomJSONString(rng *rand.Rand, buf []byte, name bool) []byte {
	pieces := []string{"a", "b", `\u0061`, "é", `\u00e9`, "<", `\/`, `\"`, `\\`, `\n`, `\t`, `\b`,
		`\u0001`, `\u2028`, "\u2029", "😀", `\ud83d\ude00`, "&", "\x7f", "z"}
	n := 1 + rng.IntN(4)
	if name {
		pieces, n = []string{"a", "b", `\u0061`, "B", "k", "\u212a", `\u017f`, "S", "É"}, 1+rng.IntN(2)
	}
	buf = append(buf, '"')
	for range n {
		buf = append(buf, pieces[rng.IntN(len(pieces))]...)
	}
	return append(buf, '"')
}

// BenchmarkCanonicalJSON measures Canonical, and encoding/json's way
// to the same bytes beside it, on a 1 KiB payment (members out of order,
// spaced), the same with camelCase names, and on five 1 MiB bodies of many
// small values: arrays of spaced zeros, of objects of two members in
// reverse order, and of spaced empty objects, and objects of numbered
// members in reverse order, named in lower case or in camelCase.
func BenchmarkCanonicalJSON(b *testing.B) {
	zeros := append(bytes.Repeat([]byte("0, "), 1<<20/3-1), '0')
	zeros = append(append([]byte{'['}, zeros...), ']')
	numberedMembers := func(prefix string) []byte {
		members := []byte{'{'}
		for i := 80000; len(members) < 1<<20-16; i-- {
			members = append(members, '"')
			members = append(members, prefix...)
			members = strconv.AppendInt(members, int64(i), 10)
			members = append(members, `":0,`...)
		}
		return append(members, `"a":0}`...)
	}
	members, camelMembers := numberedMembers("m"), numberedMembers("itemNo")
	pairs := append(bytes.Repeat([]byte(`{"b":0,"a":0},`), 1<<20/14-1), `{"b":0,"a":0}`...)
	pairs = append(append([]byte{'['}, pairs...), ']')
	empties := append(bytes.Repeat([]byte(`{}, `), 1<<20/4-1), `{}`...)
	empties = append(append([]byte{'['}, empties...), ']')
	payment := []byte(`{"note": "`)
	payment = append(payment, bytes.Repeat([]byte("x"), 1024-len(payment)-len(`", "currency": "EUR", "amount": 100}`))...)
	payment = append(payment, `", "currency": "EUR", "amount": 100}`...)
	camelPayment := []byte(`{"paymentNote": "`)
	camelPayment = append(camelPayment, bytes.Repeat([]byte("x"), 1024-len(camelPayment)-len(`", "currencyCode": "EUR", "amountMinor": 100}`))...)
	camelPayment = append(camelPayment, `", "currencyCode": "EUR", "amountMinor": 100}`...)
	for name, body := range map[string][]byte{
		"payment-1KiB": payment, "camel-payment-1KiB": camelPayment, "zeros-1MiB": zeros, "members-1MiB": members,
		"camel-members-1MiB": camelMembers, "pairs-1MiB": pairs, "empties-1MiB": empties,
	} {
		require.False(b, bytes.Equal(body, encodingJSONCanonical(body)), "%s must be accepted, and changed", name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				Canonical(body)
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				encodingJSONCanonical(body)
			}
		})
	}
}
