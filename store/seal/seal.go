package seal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
)

// Header is the one header of a sealed response; its value is the id of
// the key that sealed it.
const Header = "Idempotency-Seal"

// ErrKeyMissing is wrapped by Open's error for a response sealed under a
// key the ring does not hold (removed, or never added here).
var ErrKeyMissing = errors.New("seal: sealed under a key not in the ring")

// ErrCorrupt is wrapped by Open's error for a sealed response that does not
// open under its key: changed, or moved to another record.
var ErrCorrupt = errors.New("seal: sealed response does not open")

// Seal returns resp encrypted under the current key for the record filed
// under keyHash (store.HashKey of its storage key): the same status, Header
// alone naming the key, and a body holding resp's header and body. A nil
// resp seals to nil. resp is not changed.
func (r *Ring) Seal(keyHash string, resp *store.Response) *store.Response {
	if resp == nil {
		return nil
	}
	header := headercodec.Encode(resp.Header)
	plain := make([]byte, 0, binary.MaxVarintLen64+len(header)+len(resp.Body))
	plain = binary.AppendUvarint(plain, uint64(len(header)))
	plain = append(plain, header...)
	plain = append(plain, resp.Body...)
	body := r.aeads[r.current].Seal(nil, nil, plain, additionalData(keyHash, r.current, resp.Status))
	return &store.Response{Status: resp.Status, Header: http.Header{Header: {r.current}}, Body: body}
}

// Open returns the response Seal sealed as sealed for the record filed
// under keyHash, or an error wrapping ErrKeyMissing or ErrCorrupt. A
// response without Header (stored before sealing was turned on) opens as
// itself, and nil as nil.
func (r *Ring) Open(keyHash string, sealed *store.Response) (*store.Response, error) {
	id, ok := KeyID(sealed)
	if !ok {
		return sealed, nil
	}
	aead, ok := r.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w: key %q", ErrKeyMissing, id)
	}
	plain, err := aead.Open(nil, nil, sealed.Body, additionalData(keyHash, id, sealed.Status))
	if err != nil {
		return nil, fmt.Errorf("%w: key %q: %w", ErrCorrupt, id, err)
	}
	n, size := binary.Uvarint(plain)
	if size <= 0 || n > uint64(len(plain)-size) {
		return nil, fmt.Errorf("%w: key %q: no header length", ErrCorrupt, id)
	}
	end := size + int(n)
	header, err := headercodec.Decode(plain[size:end])
	if err != nil {
		return nil, fmt.Errorf("%w: key %q: %w", ErrCorrupt, id, err)
	}
	return &store.Response{Status: sealed.Status, Header: header, Body: plain[end:]}, nil
}

// KeyID returns the id of the key resp is sealed under, or false if resp
// is not sealed.
func KeyID(resp *store.Response) (string, bool) {
	if resp == nil || len(resp.Header[Header]) == 0 {
		return "", false
	}
	return resp.Header[Header][0], true
}

// additionalData binds a sealed body to its record, key and status, so
// that none of them can be changed or the body moved to another record
// without Open failing.
func additionalData(keyHash, id string, status int) []byte {
	ad := make([]byte, 0, 64+len(keyHash)+len(id))
	ad = append(ad, "idempotency seal 1\x00"...)
	ad = append(ad, keyHash...)
	ad = append(ad, 0)
	ad = append(ad, id...)
	ad = append(ad, 0)
	return strconv.AppendInt(ad, int64(status), 10)
}
