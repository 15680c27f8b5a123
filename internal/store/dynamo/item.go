package dynamo

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/store"
)

// Attribute names of the fixed fields of store.Item (store.Reserved).
const (
	attrPK   = "pk"
	attrSK   = "sk"
	attrData = "data"
	attrTTL  = "ttl"
)

// keyAttrs returns the partition and sort key attribute names of ix.
func keyAttrs(ix store.Index) (pk, sk string) {
	if ix == store.Table {
		return attrPK, attrSK
	}
	return string(ix) + "pk", string(ix) + "sk"
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func marshalKey(k store.Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(k.PK), attrSK: str(k.SK)}
}

func marshalItem(it store.Item) map[string]types.AttributeValue {
	av := marshalKey(it.Key)
	for _, ix := range store.Indexes {
		if k := it.IndexKey(ix); k.PK != "" {
			pk, sk := keyAttrs(ix)
			av[pk], av[sk] = str(k.PK), str(k.SK)
		}
	}
	if it.Data != nil {
		av[attrData] = &types.AttributeValueMemberB{Value: packData(it.Data)}
	}
	if it.ExpiresAt != 0 {
		av[attrTTL] = num(it.ExpiresAt)
	}
	for name, v := range it.Attrs {
		av[name] = str(v)
	}
	for name, v := range it.Nums {
		av[name] = num(v)
	}
	for name, v := range it.Bins {
		av[name] = &types.AttributeValueMemberB{Value: v}
	}
	return av
}

func unmarshalItem(av map[string]types.AttributeValue) (store.Item, error) {
	var it store.Item
	for name, v := range av {
		var err error
		switch name {
		case attrPK:
			it.PK, err = asString(name, v)
		case attrSK:
			it.SK, err = asString(name, v)
		case "gsi1pk":
			it.GSI1.PK, err = asString(name, v)
		case "gsi1sk":
			it.GSI1.SK, err = asString(name, v)
		case "gsi2pk":
			it.GSI2.PK, err = asString(name, v)
		case "gsi2sk":
			it.GSI2.SK, err = asString(name, v)
		case "gsi3pk":
			it.GSI3.PK, err = asString(name, v)
		case "gsi3sk":
			it.GSI3.SK, err = asString(name, v)
		case attrData:
			b, ok := v.(*types.AttributeValueMemberB)
			if !ok {
				return store.Item{}, fmt.Errorf("dynamo: attribute %q is %T, want binary", name, v)
			}
			it.Data, err = UnpackData(b.Value)
		case attrTTL:
			it.ExpiresAt, err = asInt(name, v)
		default:
			switch v := v.(type) {
			case *types.AttributeValueMemberS:
				if it.Attrs == nil {
					it.Attrs = make(map[string]string)
				}
				it.Attrs[name] = v.Value
			case *types.AttributeValueMemberN:
				if it.Nums == nil {
					it.Nums = make(map[string]int64)
				}
				it.Nums[name], err = asInt(name, v)
			case *types.AttributeValueMemberB:
				if it.Bins == nil {
					it.Bins = make(map[string][]byte)
				}
				it.Bins[name] = v.Value
			default:
				err = fmt.Errorf("dynamo: attribute %q is %T, want string, number or binary", name, v)
			}
		}
		if err != nil {
			return store.Item{}, err
		}
	}
	return it, nil
}

func asString(name string, v types.AttributeValue) (string, error) {
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		return "", fmt.Errorf("dynamo: attribute %q is %T, want string", name, v)
	}
	return s.Value, nil
}

func asInt(name string, v types.AttributeValue) (int64, error) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("dynamo: attribute %q is %T, want number", name, v)
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dynamo: attribute %q = %s is not an int64", name, n.Value)
	}
	return i, nil
}
