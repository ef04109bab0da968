package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Community is a BGP community value: standard (RFC 1997) or large
// (RFC 8092).
type Community struct {
	Large bool
	// Standard is ASN<<16 | value.
	Standard uint32
	// LargeValue is global administrator, local data 1, local data 2.
	LargeValue [3]uint32
}

func (c Community) String() string {
	if c.Large {
		return fmt.Sprintf("large:%d:%d:%d", c.LargeValue[0], c.LargeValue[1], c.LargeValue[2])
	}
	return fmt.Sprintf("%d:%d", c.Standard>>16, c.Standard&0xffff)
}

// wellKnownCommunities are the names routers use for the communities IANA
// reserves; users may write them wherever a community is expected.
var wellKnownCommunities = map[string]uint32{
	"graceful-shutdown":   0xffff0000, // RFC 8326
	"blackhole":           0xffff029a, // RFC 7999
	"no-export":           0xffffff01, // RFC 1997
	"no-advertise":        0xffffff02,
	"no-export-subconfed": 0xffffff03,
	"no-peer":             0xffffff04, // RFC 3765
}

// WellKnownCommunity returns the community a well-known name (no-export,
// …) stands for; Community objects cannot redefine these names.
func WellKnownCommunity(name string) (Community, bool) {
	v, ok := wellKnownCommunities[name]
	return Community{Standard: v}, ok
}

var aliasName = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$`)

// ParseCommunity parses a numeric community, "ASN:value" with two 16-bit
// numbers or "large:ASN:value1:value2" with three 32-bit numbers. Aliases are
// resolved by the caller.
func ParseCommunity(s string) (Community, error) {
	if rest, ok := strings.CutPrefix(s, "large:"); ok {
		parts := strings.Split(rest, ":")
		if len(parts) != 3 {
			return Community{}, fmt.Errorf("%q is not a large community: write large:ASN:value1:value2", s)
		}
		var c Community
		c.Large = true
		for i, p := range parts {
			v, err := parseDecimal(p, 32)
			if err != nil {
				return Community{}, fmt.Errorf("%q: part %d %v (0-4294967295)", s, i+1, err)
			}
			c.LargeValue[i] = uint32(v)
		}
		return c, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 2 {
		return Community{}, fmt.Errorf("%q is not a community: write ASN:value, large:ASN:value1:value2 or an alias name", s)
	}
	hi, err := parseDecimal(parts[0], 16)
	if err != nil {
		return Community{}, fmt.Errorf("%q: the ASN part %v (0-65535)", s, err)
	}
	lo, err := parseDecimal(parts[1], 16)
	if err != nil {
		return Community{}, fmt.Errorf("%q: the value part %v (0-65535)", s, err)
	}
	return Community{Standard: uint32(hi)<<16 | uint32(lo)}, nil
}

// parseDecimal accepts only ASCII digits, unlike strconv which also takes a
// sign or underscores in some modes.
func parseDecimal(s string, bits int) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("is empty")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%s is out of range", s)
	}
	return v, nil
}

// resolveCommunity turns a value from a BGPAdvertisement into a community:
// a number, a well-known name, or an alias from Community objects.
func resolveCommunity(s string, aliases map[string]aliasDef) (Community, error) {
	if strings.Contains(s, ":") {
		return ParseCommunity(s)
	}
	if !aliasName.MatchString(s) {
		return Community{}, fmt.Errorf("%q is neither a community number nor an alias name (letters, digits, '-', '_', '.')", s)
	}
	if d, ok := aliases[s]; ok {
		if d.broken != "" {
			return Community{}, fmt.Errorf("alias %q is defined in Community %s, which has problems and is not in use", s, d.broken)
		}
		return d.value, nil
	}
	if v, ok := wellKnownCommunities[s]; ok {
		return Community{Standard: v}, nil
	}
	return Community{}, fmt.Errorf("no Community object defines the alias %q, and it is not a well-known community", s)
}

type aliasDef struct {
	value  Community
	from   string // Community object name
	broken string // set when the defining object was left out
}
