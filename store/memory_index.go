package store

import "hash/maphash"

// recordIndex holds a Memory store's records in numbered slots and finds
// them by key: a map takes a key's 32-bit hash to the slot of the first
// record with it, and records sharing a hash are chained through next. The
// map holds no pointers, so the garbage collector never scans it, and
// 32-bit hashes keep its entries at 8 bytes. Slots come in pages, so that
// growing never copies the records already held (under the store's lock).
type recordIndex struct {
	hash  func(key string) uint32
	first map[uint32]int32
	pages []*[slotsPerPage]memRecord // a free slot is the zero memRecord
	slots int32                      // slots handed out, free ones included
	free  []int32
}

const slotsPerPage = 512

// at returns slot i, which must have been handed out.
func (x *recordIndex) at(i int32) *memRecord { return &x.pages[i/slotsPerPage][i%slotsPerPage] }

func newRecordIndex() recordIndex {
	seed := maphash.MakeSeed()
	return recordIndex{
		hash:  func(key string) uint32 { return uint32(maphash.String(seed, key)) },
		first: make(map[uint32]int32),
	}
}

// find returns the slot of key's record, or -1.
func (x *recordIndex) find(h uint32, key string) int32 {
	i, ok := x.first[h]
	if !ok {
		return -1
	}
	for ; i >= 0; i = x.at(i).next {
		if x.at(i).key() == key {
			return i
		}
	}
	return -1
}

// insert adds r, the record of a key that has none yet.
func (x *recordIndex) insert(h uint32, r memRecord) {
	var i int32
	if n := len(x.free); n > 0 {
		i, x.free = x.free[n-1], x.free[:n-1]
	} else {
		i = x.slots
		if i%slotsPerPage == 0 {
			x.pages = append(x.pages, new([slotsPerPage]memRecord))
		}
		x.slots++
	}
	r.hash, r.next = h, -1
	if next, ok := x.first[h]; ok {
		r.next = next
	}
	*x.at(i) = r
	x.first[h] = i
}

func (x *recordIndex) replace(i int32, r memRecord) {
	r.hash, r.next = x.at(i).hash, x.at(i).next
	*x.at(i) = r
}

func (x *recordIndex) remove(i int32) {
	h, next := x.at(i).hash, x.at(i).next
	if head := x.first[h]; head == i {
		if next < 0 {
			delete(x.first, h)
		} else {
			x.first[h] = next
		}
	} else {
		p := head
		for x.at(p).next != i {
			p = x.at(p).next
		}
		x.at(p).next = next
	}
	*x.at(i) = memRecord{} // a free slot keeps no strings alive
	x.free = append(x.free, i)
}

func (x *recordIndex) len() int { return int(x.slots) - len(x.free) }
