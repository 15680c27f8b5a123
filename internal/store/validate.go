package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// The rules stated on Key, IndexKey, Item, Query, Op, Cond and Store are
// checked here, once for every backend: a request that DynamoDB would refuse,
// or that one of the backends could not store faithfully, is rejected with
// ErrInvalid before anything is read or written, so that what works on the
// embedded store works on DynamoDB and the other way round.

// DynamoDB's limits on key sizes in bytes, for the table and its indexes.
const (
	maxPK = 2048
	maxSK = 1024
)

// The range of Query.Limit, and what 0 stands for.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// ValidateKey checks the key of a Get.
func ValidateKey(k Key) error {
	return invalid(validateKey(k))
}

// ValidateQuery checks q and returns its effective limit.
func ValidateQuery(q Query) (limit int, err error) {
	if err := invalid(validateQuery(q)); err != nil {
		return 0, err
	}
	if q.Limit == 0 {
		return defaultLimit, nil
	}
	return q.Limit, nil
}

// ValidateOps checks the operations of a Transact call.
func ValidateOps(ops []Op) error {
	if len(ops) == 0 || len(ops) > MaxTransactOps {
		return fmt.Errorf("%w: a transaction needs 1 to %d operations, got %d", ErrInvalid, MaxTransactOps, len(ops))
	}
	seen := make(map[Key]bool, len(ops))
	for i, op := range ops {
		if err := validateOp(op); err != nil {
			return fmt.Errorf("%w: operation %d: %w", ErrInvalid, i, err)
		}
		k := op.Target()
		if seen[k] {
			return fmt.Errorf("%w: operation %d: key %q/%q appears twice in the transaction", ErrInvalid, i, k.PK, k.SK)
		}
		seen[k] = true
	}
	return nil
}

// ValidateUpdate checks the operation of an Update call, which must be an
// OpUpdate.
func ValidateUpdate(op Op) error {
	if op.Kind != OpUpdate {
		return fmt.Errorf("%w: Update needs an OpUpdate, got kind %d", ErrInvalid, op.Kind)
	}
	return invalid(validateOp(op))
}

// invalid marks a rule's complaint, if any, as ErrInvalid.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

func validateQuery(q Query) error {
	if q.Index != Table && !slices.Contains(Indexes, q.Index) {
		return fmt.Errorf("unknown index %q", q.Index)
	}
	if q.PK == "" {
		return errors.New("query needs a partition key")
	}
	if err := validateKeyParts(q.PK, q.SKPrefix, q.SKFrom, q.SKTo); err != nil {
		return err
	}
	if q.SKPrefix != "" && (q.SKFrom != "" || q.SKTo != "") {
		// DynamoDB takes one sort key condition per query.
		return errors.New("query has both a sort key prefix and bounds")
	}
	if q.SKFrom != "" && q.SKTo != "" && q.SKFrom > q.SKTo {
		return fmt.Errorf("query bounds %q > %q", q.SKFrom, q.SKTo)
	}
	if q.Limit < 0 || q.Limit > maxLimit {
		return fmt.Errorf("query limit %d out of range 1..%d", q.Limit, maxLimit)
	}
	return nil
}

func validateOp(op Op) error {
	if op.Kind < OpPut || op.Kind > OpCheck {
		return fmt.Errorf("unknown operation kind %d", op.Kind)
	}
	if err := validateKey(op.Target()); err != nil {
		return err
	}
	switch op.Kind {
	case OpPut:
		if err := validateIndexKeys(op.Item); err != nil {
			return err
		}
		if err := validateAttrs(op.Item.Attrs, op.Item.Nums); err != nil {
			return err
		}
		if err := validateBins(op.Item); err != nil {
			return err
		}
	case OpUpdate:
		if len(op.Set) == 0 && len(op.Add) == 0 && op.ExpiresAt == 0 {
			// DynamoDB needs an update expression.
			return errors.New("update that changes nothing")
		}
		if err := validateAttrs(op.Set, op.Add); err != nil {
			return err
		}
	case OpCheck:
		if len(op.Conds) == 0 {
			// DynamoDB needs a condition expression.
			return errors.New("check without conditions")
		}
	}
	for _, c := range op.Conds {
		switch c.Kind {
		case CondExists, CondNotExists:
		case CondAttrEquals, CondNumLess, CondNumEquals:
			if err := validateAttr(c.Attr, c.S); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown condition kind %d", c.Kind)
		}
	}
	return nil
}

func validateKey(k Key) error {
	if k.PK == "" || k.SK == "" {
		return fmt.Errorf("key %q/%q has an empty part", k.PK, k.SK)
	}
	return validateKeyParts(k.PK, k.SK)
}

func validateIndexKeys(it Item) error {
	for _, ix := range Indexes {
		ik := it.IndexKey(ix)
		if (ik.PK == "") != (ik.SK == "") {
			// DynamoDB cannot store an empty string as an index key, and
			// leaves an item out of an index unless it has both keys.
			return fmt.Errorf("%s key %q/%q needs both parts or neither", ix, ik.PK, ik.SK)
		}
		if err := validateKeyParts(ik.PK, ik.SK); err != nil {
			return err
		}
	}
	return nil
}

// validateKeyParts checks a partition key and sort keys (or a sort key prefix
// and bounds): they must fit DynamoDB's limits, contain no 0x00 (the embedded
// backend's separator, and so excluded everywhere to keep the backends
// alike), and be valid UTF-8 (which JSON, in both backends, would otherwise
// mangle).
func validateKeyParts(pk string, sks ...string) error {
	if len(pk) > maxPK {
		return fmt.Errorf("partition key of %d bytes, over %d", len(pk), maxPK)
	}
	for _, sk := range sks {
		if len(sk) > maxSK {
			return fmt.Errorf("sort key of %d bytes, over %d", len(sk), maxSK)
		}
	}
	for _, sk := range sks {
		if err := validKeyText(sk); err != nil {
			return err
		}
	}
	return validKeyText(pk)
}

func validKeyText(p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("key %q contains 0x00", p)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("key %q is not valid UTF-8", p)
	}
	return nil
}

// validateAttrs checks the string and numeric attributes of an item or an
// update, which share one namespace.
func validateAttrs(strs map[string]string, nums map[string]int64) error {
	for name, v := range strs {
		if err := validateAttr(name, v); err != nil {
			return err
		}
		if _, ok := nums[name]; ok {
			return fmt.Errorf("attribute %q is both a string and a number", name)
		}
	}
	for name := range nums {
		if err := validateAttr(name, ""); err != nil {
			return err
		}
	}
	return nil
}

// validateBins checks an item's binary attributes, which share the
// namespace of its strings and numbers.
func validateBins(it Item) error {
	for name, v := range it.Bins {
		if err := validateAttr(name, ""); err != nil {
			return err
		}
		if len(v) == 0 {
			return fmt.Errorf("binary attribute %q is empty", name)
		}
		_, isStr := it.Attrs[name]
		_, isNum := it.Nums[name]
		if isStr || isNum {
			return fmt.Errorf("attribute %q is both binary and a string or number", name)
		}
	}
	return nil
}

func validateAttr(name, value string) error {
	if name == "" {
		return errors.New("empty attribute name")
	}
	if slices.Contains(Reserved, name) {
		return fmt.Errorf("attribute name %q is reserved", name)
	}
	if !utf8.ValidString(name) || !utf8.ValidString(value) {
		return fmt.Errorf("attribute %q is not valid UTF-8", name)
	}
	return nil
}
