package store

import "hash/maphash"

// recordIndex holds a Memory store's records in one slice and finds them
// by key: a map takes a key's 32-bit hash to the slot of the first record
// with it, and records sharing a hash are chained through next. The map
// holds no pointers, so the garbage collector never scans it, and 32-bit
// hashes keep its entries at 8 bytes.
type recordIndex struct {
	hash  func(key string) uint32
	first map[uint32]int32
	slots []memRecord // a free slot is the zero memRecord
	free  []int32
}

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
	for ; i >= 0; i = x.slots[i].next {
		if x.slots[i].key() == key {
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
		i = int32(len(x.slots))
		x.slots = append(x.slots, memRecord{})
	}
	r.hash, r.next = h, -1
	if next, ok := x.first[h]; ok {
		r.next = next
	}
	x.slots[i] = r
	x.first[h] = i
}

func (x *recordIndex) replace(i int32, r memRecord) {
	r.hash, r.next = x.slots[i].hash, x.slots[i].next
	x.slots[i] = r
}

func (x *recordIndex) remove(i int32) {
	h, next := x.slots[i].hash, x.slots[i].next
	if head := x.first[h]; head == i {
		if next < 0 {
			delete(x.first, h)
		} else {
			x.first[h] = next
		}
	} else {
		p := head
		for x.slots[p].next != i {
			p = x.slots[p].next
		}
		x.slots[p].next = next
	}
	x.slots[i] = memRecord{} // a free slot keeps no strings alive
	x.free = append(x.free, i)
}

func (x *recordIndex) len() int { return len(x.slots) - len(x.free) }
