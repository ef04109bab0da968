package members

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sort"
	"strings"
)

// keyInfo binds derived keys to this use and this version: the same Secret
// used for anything else (or by a later, incompatible gossip format) yields
// an unrelated key.
const keyInfo = "herald memberlist v1"

// MinSecretLen is the shortest secret accepted. HKDF stretches but cannot
// add entropy, so a short secret would make a weak key.
const MinSecretLen = 16

// KeyLen selects AES-256-GCM in memberlist.
const KeyLen = 32

const redacted = "<redacted>"

// Secret is key material from the Kubernetes Secret. It prints as
// <redacted> with every fmt verb, in slog and in JSON, so a Config can be
// logged whole.
type Secret []byte

// String hides the value.
func (Secret) String() string { return redacted }

// GoString hides the value from %#v.
func (Secret) GoString() string { return redacted }

// Format hides the value from every verb, including %x and %d, which
// would otherwise print the bytes of a []byte type.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue hides the value from slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON hides the value from encoding/json.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// Key is the derived gossip encryption key; it is redacted like Secret.
type Key [KeyLen]byte

// String hides the value.
func (Key) String() string { return redacted }

// GoString hides the value from %#v.
func (Key) GoString() string { return redacted }

// Format hides the value from every verb.
func (Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue hides the value from slog.
func (Key) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON hides the value from encoding/json.
func (Key) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// DeriveKey derives the 32-byte gossip key from secret with HKDF-SHA256
// (no salt: the secret is already uniformly random material created by the
// controller; the fixed info string separates this use). Every speaker
// derives the same key from the same Secret. Errors never include the
// secret.
func DeriveKey(secret Secret) (Key, error) {
	var k Key
	if len(secret) < MinSecretLen {
		return k, fmt.Errorf("memberlist secret is %d bytes, need at least %d", len(secret), MinSecretLen)
	}
	b, err := hkdf.Key(sha256.New, secret, nil, keyInfo, KeyLen)
	if err != nil {
		return k, fmt.Errorf("deriving the memberlist key: %w", err)
	}
	copy(k[:], b)
	clear(b)
	return k, nil
}

// KeysFromSecret reads the key materials of the memberlist Secret's data:
// key is the primary one, the messages are sent with it; every key named
// key + "-" + anything (secretkey-next, secretkey-old) is accepted too,
// in name order. That is what a rotation in three steps needs: add the
// new material under another name, swap the two, remove the old one.
func KeysFromSecret(data map[string][]byte, key string) (Secret, []Secret, error) {
	primary := data[key]
	if len(primary) < MinSecretLen {
		return nil, nil, fmt.Errorf("key %q is missing or shorter than %d bytes", key, MinSecretLen)
	}
	var names []string
	for k := range data {
		if strings.HasPrefix(k, key+"-") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var extra []Secret
	for _, n := range names {
		if len(data[n]) < MinSecretLen {
			return nil, nil, fmt.Errorf("key %q is shorter than %d bytes", n, MinSecretLen)
		}
		extra = append(extra, Secret(data[n]))
	}
	return Secret(primary), extra, nil
}
