package dynamo

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/tally-hq/tally/internal/store"
)

// errInvalid marks requests the store refuses before calling DynamoDB, so
// callers get the same answer the embedded backend gives instead of a
// DynamoDB ValidationException.
var errInvalid = errors.New("dynamo: invalid request")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalid}, args...)...)
}

// DynamoDB's size limits on key values, in bytes, for tables and indexes.
const (
	maxPK = 2048
	maxSK = 1024
)

func validateKey(k store.Key) error {
	if k.PK == "" || k.SK == "" {
		return invalidf("empty key %q/%q", k.PK, k.SK)
	}
	return validateKeyParts(k.PK, k.SK)
}

func validateKeyParts(pk string, sks ...string) error {
	if len(pk) > maxPK {
		return invalidf("partition key of %d bytes, over %d", len(pk), maxPK)
	}
	for _, sk := range sks {
		if len(sk) > maxSK {
			return invalidf("sort key of %d bytes, over %d", len(sk), maxSK)
		}
	}
	if err := validateStrings(pk); err != nil {
		return err
	}
	return validateStrings(sks...)
}

// validateStrings rejects invalid UTF-8, which the SDK's JSON encoding would
// silently replace with U+FFFD.
func validateStrings(ss ...string) error {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return invalidf("%q is not valid UTF-8", s)
		}
	}
	return nil
}

// validateQuery checks q and returns its effective limit.
func validateQuery(q store.Query) (int, error) {
	if q.Index != store.Table && !slices.Contains(store.Indexes, q.Index) {
		return 0, invalidf("unknown index %q", q.Index)
	}
	if q.PK == "" {
		return 0, invalidf("query without partition key")
	}
	if err := validateKeyParts(q.PK, q.SKPrefix, q.SKFrom, q.SKTo); err != nil {
		return 0, err
	}
	if q.SKPrefix != "" && (q.SKFrom != "" || q.SKTo != "") {
		// DynamoDB takes one sort key condition per query.
		return 0, invalidf("query with both a sort key prefix and bounds")
	}
	if q.SKFrom != "" && q.SKTo != "" && q.SKFrom > q.SKTo {
		return 0, invalidf("query bounds %q > %q", q.SKFrom, q.SKTo)
	}
	switch {
	case q.Limit == 0:
		return 100, nil
	case q.Limit < 0 || q.Limit > 1000:
		return 0, invalidf("query limit %d outside 1..1000", q.Limit)
	}
	return q.Limit, nil
}

func validateOps(ops []store.Op) error {
	if len(ops) == 0 || len(ops) > store.MaxTransactOps {
		return invalidf("transaction of %d operations, want 1..%d", len(ops), store.MaxTransactOps)
	}
	seen := make(map[store.Key]bool, len(ops))
	for i, op := range ops {
		if err := validateOp(op); err != nil {
			return fmt.Errorf("operation %d: %w", i, err)
		}
		k := op.Target()
		if seen[k] {
			return invalidf("operation %d: key %s/%s appears twice in the transaction", i, k.PK, k.SK)
		}
		seen[k] = true
	}
	return nil
}

func validateOp(op store.Op) error {
	if err := validateKey(op.Target()); err != nil {
		return err
	}
	switch op.Kind {
	case store.OpPut:
		if err := validateItem(op.Item); err != nil {
			return err
		}
	case store.OpUpdate:
		if len(op.Set) == 0 && len(op.Add) == 0 && op.ExpiresAt == 0 {
			// DynamoDB requires an update expression in a transaction.
			return invalidf("update that changes nothing")
		}
		if err := validateNames(op.Set, op.Add); err != nil {
			return err
		}
	case store.OpDelete:
	case store.OpCheck:
		if len(op.Conds) == 0 {
			return invalidf("check without conditions")
		}
	default:
		return invalidf("unknown operation kind %d", op.Kind)
	}
	for _, c := range op.Conds {
		switch c.Kind {
		case store.CondExists, store.CondNotExists:
		case store.CondAttrEquals, store.CondNumLess, store.CondNumEquals:
			if err := validateName(c.Attr); err != nil {
				return err
			}
			if err := validateStrings(c.S); err != nil {
				return err
			}
		default:
			return invalidf("unknown condition kind %d", c.Kind)
		}
	}
	return nil
}

func validateItem(it store.Item) error {
	for _, ix := range store.Indexes {
		// DynamoDB cannot store an empty string as an index key.
		k := it.IndexKey(ix)
		if (k.PK == "") != (k.SK == "") {
			return invalidf("%s key %q/%q is half empty", ix, k.PK, k.SK)
		}
		if err := validateKeyParts(k.PK, k.SK); err != nil {
			return err
		}
	}
	return validateNames(it.Attrs, it.Nums)
}

// validateNames checks the names of a string and a numeric attribute map,
// which share one namespace in the item.
func validateNames(strs map[string]string, nums map[string]int64) error {
	for name, v := range strs {
		if err := validateName(name); err != nil {
			return err
		}
		if err := validateStrings(v); err != nil {
			return err
		}
	}
	for name := range nums {
		if err := validateName(name); err != nil {
			return err
		}
		if _, ok := strs[name]; ok {
			return invalidf("attribute %q is both a string and a number", name)
		}
	}
	return nil
}

func validateName(name string) error {
	if name == "" {
		return invalidf("empty attribute name")
	}
	if slices.Contains(store.Reserved, name) {
		return invalidf("attribute name %q is reserved", name)
	}
	return validateStrings(name)
}
