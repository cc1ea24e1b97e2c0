//! Address arithmetic: does a union of CIDRs cover a source, and if not, which part is left out.
//!
//! Security group rules admit traffic whose source lies in their remote prefix; several rules together
//! may admit a range none admits alone (`0.0.0.0/1` and `128.0.0.0/1`). Sources are CIDRs (a client
//! range) or single addresses (`/32`, `/128`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// An inclusive range of addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    v6: bool,
    lo: u128,
    hi: u128,
}

impl From<IpNet> for Range {
    fn from(n: IpNet) -> Range {
        match n {
            IpNet::V4(n) => Range {
                v6: false,
                lo: u128::from(u32::from(n.network())),
                hi: u128::from(u32::from(n.broadcast())),
            },
            IpNet::V6(n) => Range {
                v6: true,
                lo: u128::from(n.network()),
                hi: u128::from(n.broadcast()),
            },
        }
    }
}

impl Range {
    fn addr(&self, x: u128) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(x))
        } else {
            // The value came from a u32.
            IpAddr::V4(Ipv4Addr::from(u32::try_from(x).unwrap_or(u32::MAX)))
        }
    }
}

/// Shown as a CIDR when it is one, else `first-last`.
impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = self.hi - self.lo;
        let aligned = size.checked_add(1).is_none_or(|n| n.is_power_of_two())
            && (size == u128::MAX || self.lo & size == 0);
        if aligned {
            let bits = if self.v6 { 128 } else { 32 };
            let host = 128 - size.leading_zeros();
            let prefix = u8::try_from(bits - host).unwrap_or(0);
            match IpNet::new(self.addr(self.lo), prefix) {
                Ok(n) if prefix == bits as u8 => write!(f, "{}", n.addr()),
                Ok(n) => write!(f, "{n}"),
                Err(_) => write!(f, "{}-{}", self.addr(self.lo), self.addr(self.hi)),
            }
        } else {
            write!(f, "{}-{}", self.addr(self.lo), self.addr(self.hi))
        }
    }
}

/// The first part of `want` that no net of `have` covers (nets of the other family are ignored), or
/// `None` when `have` covers it all.
#[must_use]
pub fn uncovered(want: IpNet, have: &[IpNet]) -> Option<Range> {
    let want = Range::from(want);
    let mut covers: Vec<Range> = have
        .iter()
        .map(|n| Range::from(*n))
        .filter(|r| r.v6 == want.v6 && r.hi >= want.lo && r.lo <= want.hi)
        .collect();
    covers.sort_by_key(|r| r.lo);
    let mut next = want.lo;
    for r in covers {
        if r.lo > next {
            return Some(Range {
                v6: want.v6,
                lo: next,
                hi: (r.lo - 1).min(want.hi),
            });
        }
        if r.hi >= want.hi {
            return None;
        }
        next = next.max(r.hi + 1);
    }
    Some(Range {
        v6: want.v6,
        lo: next,
        hi: want.hi,
    })
}

/// `addr` as a one-address net.
#[must_use]
pub fn host(addr: IpAddr) -> IpNet {
    IpNet::from(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().expect("a CIDR")
    }

    #[test]
    fn several_nets_together_cover_what_none_covers_alone() {
        let halves = [net("0.0.0.0/1"), net("128.0.0.0/1")];
        assert_eq!(uncovered(net("0.0.0.0/0"), &halves), None);
        assert_eq!(
            uncovered(net("0.0.0.0/0"), &halves[..1]).map(|r| r.to_string()),
            Some("128.0.0.0/1".into())
        );
    }

    #[test]
    fn the_gap_is_reported_as_a_cidr_or_a_range() {
        let have = [net("10.0.0.0/25"), net("10.0.0.192/26")];
        assert_eq!(
            uncovered(net("10.0.0.0/24"), &have).map(|r| r.to_string()),
            Some("10.0.0.128/26".into())
        );
        let have = [net("10.0.0.0/25"), net("10.0.0.200/32")];
        assert_eq!(
            uncovered(net("10.0.0.0/24"), &have).map(|r| r.to_string()),
            Some("10.0.0.128-10.0.0.199".into())
        );
        assert_eq!(
            uncovered(net("10.0.0.7/32"), &[]).map(|r| r.to_string()),
            Some("10.0.0.7".into())
        );
    }

    #[test]
    fn families_never_cover_each_other() {
        assert!(uncovered(net("2001:db8::1/128"), &[net("0.0.0.0/0")]).is_some());
        assert_eq!(uncovered(net("2001:db8::1/128"), &[net("::/0")]), None);
        assert_eq!(
            uncovered(net("::/0"), &[]).map(|r| r.to_string()),
            Some("::/0".into())
        );
    }
}
