package bolt

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tally-hq/tally/internal/store"
)

// DynamoDB's limits on key sizes in bytes, enforced here too so that what
// works on the embedded store works on DynamoDB.
const (
	maxPK = 2048
	maxSK = 1024
)

// checkOps rejects transactions that DynamoDB would reject, and keys or
// names this layout cannot represent, before anything is read.
func checkOps(ops []store.Op) error {
	if len(ops) == 0 || len(ops) > store.MaxTransactOps {
		return fmt.Errorf("bolt: a transaction needs 1 to %d operations, got %d", store.MaxTransactOps, len(ops))
	}
	seen := make(map[store.Key]bool, len(ops))
	for i, op := range ops {
		if err := checkOp(op); err != nil {
			return fmt.Errorf("bolt: operation %d: %w", i, err)
		}
		k := op.Target()
		if seen[k] {
			return fmt.Errorf("bolt: operation %d: key %q/%q appears twice in the transaction", i, k.PK, k.SK)
		}
		seen[k] = true
	}
	return nil
}

func checkOp(op store.Op) error {
	switch op.Kind {
	case store.OpPut:
		if err := checkItem(op.Item); err != nil {
			return err
		}
	case store.OpUpdate:
		if err := checkKey(op.Key); err != nil {
			return err
		}
		if len(op.Set) == 0 && len(op.Add) == 0 && op.ExpiresAt == 0 {
			// DynamoDB needs an update expression.
			return errors.New("update that changes nothing")
		}
		for name, v := range op.Set {
			if err := checkAttr(name, v); err != nil {
				return err
			}
			if _, ok := op.Add[name]; ok {
				return fmt.Errorf("attribute %q both set and added", name)
			}
		}
		for name := range op.Add {
			if err := checkAttr(name, ""); err != nil {
				return err
			}
		}
	case store.OpDelete:
		if err := checkKey(op.Key); err != nil {
			return err
		}
	case store.OpCheck:
		if err := checkKey(op.Key); err != nil {
			return err
		}
		if len(op.Conds) == 0 {
			// DynamoDB needs a condition expression.
			return errors.New("check without conditions")
		}
	default:
		return fmt.Errorf("unknown operation kind %d", op.Kind)
	}
	for _, c := range op.Conds {
		switch c.Kind {
		case store.CondExists, store.CondNotExists:
		case store.CondAttrEquals, store.CondNumLess, store.CondNumEquals:
			if err := checkAttr(c.Attr, c.S); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown condition kind %d", c.Kind)
		}
	}
	return nil
}

func checkItem(it store.Item) error {
	if err := checkKey(it.Key); err != nil {
		return err
	}
	for _, ix := range store.Indexes {
		ik := it.IndexKey(ix)
		if (ik.PK == "") != (ik.SK == "") {
			// DynamoDB leaves an item out of an index unless it has both
			// keys; rejecting half keys keeps the backends alike.
			return fmt.Errorf("%s key %q/%q needs both parts or neither", ix, ik.PK, ik.SK)
		}
		if err := checkKeyParts(ik.PK, ik.SK); err != nil {
			return err
		}
	}
	for name, v := range it.Attrs {
		if err := checkAttr(name, v); err != nil {
			return err
		}
		if _, ok := it.Nums[name]; ok {
			return fmt.Errorf("attribute %q is both a string and a number", name)
		}
	}
	for name := range it.Nums {
		if err := checkAttr(name, ""); err != nil {
			return err
		}
	}
	return nil
}

func checkKey(k store.Key) error {
	if k.PK == "" || k.SK == "" {
		return fmt.Errorf("key %q/%q has an empty part", k.PK, k.SK)
	}
	return checkKeyParts(k.PK, k.SK)
}

// checkKeyParts checks a partition key and sort keys (or sort key bounds):
// they must fit DynamoDB's limits, not contain the 0x00 separator of the
// layout, and be valid UTF-8 (which JSON, here and in DynamoDB, would
// otherwise mangle).
func checkKeyParts(pk string, sks ...string) error {
	if len(pk) > maxPK {
		return fmt.Errorf("partition key of %d bytes, over %d", len(pk), maxPK)
	}
	for _, sk := range sks {
		if len(sk) > maxSK {
			return fmt.Errorf("sort key of %d bytes, over %d", len(sk), maxSK)
		}
	}
	for _, p := range append(sks, pk) {
		if strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("key %q contains 0x00", p)
		}
		if !utf8.ValidString(p) {
			return fmt.Errorf("key %q is not valid UTF-8", p)
		}
	}
	return nil
}

func checkAttr(name, value string) error {
	if name == "" {
		return errors.New("empty attribute name")
	}
	if slices.Contains(store.Reserved, name) {
		return fmt.Errorf("attribute name %q is reserved", name)
	}
	if !utf8.ValidString(name) || !utf8.ValidString(value) {
		return fmt.Errorf("attribute %q is not valid UTF-8", name)
	}
	return nil
}

// checkQuery validates q and returns its effective limit.
func checkQuery(q store.Query) (int, error) {
	if q.Index != store.Table && !slices.Contains(store.Indexes, q.Index) {
		return 0, fmt.Errorf("unknown index %q", q.Index)
	}
	if q.PK == "" {
		return 0, errors.New("query needs a partition key")
	}
	if err := checkKeyParts(q.PK, q.SKPrefix, q.SKFrom, q.SKTo); err != nil {
		return 0, err
	}
	if q.SKPrefix != "" && (q.SKFrom != "" || q.SKTo != "") {
		return 0, errors.New("query has both a sort key prefix and bounds")
	}
	if q.SKFrom != "" && q.SKTo != "" && q.SKFrom > q.SKTo {
		return 0, fmt.Errorf("query bounds %q > %q", q.SKFrom, q.SKTo)
	}
	switch {
	case q.Limit == 0:
		return 100, nil
	case q.Limit < 0 || q.Limit > 1000:
		return 0, fmt.Errorf("query limit %d out of range 1..1000", q.Limit)
	}
	return q.Limit, nil
}
