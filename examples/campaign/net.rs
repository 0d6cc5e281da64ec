//! Network partitions between the fleet's servers, made and healed with
//! nftables.
//!
//! Every server listens on loopback twice over: at 127.0.0.1, where clients
//! and the driver reach it, and at one address per kind of link between
//! servers (`Link`), where the other servers reach it. A cut drops every
//! packet to and from one server's port at one link address, both ways, as
//! a partition does: the two ends of that link lose each other (an
//! established connection hangs until a timeout or the heal, a new one gets
//! no answer), while clients still reach both, as in the partition probe
//! whose clients ran inside each server's network namespace.
//!
//! The rules live in an nftables table of the run's own
//! (`snowflake_campaign_PID`), deleted when the `Net` is dropped, and by
//! scripts/campaign, at its start and exit, when a killed run left it.

use std::process::Output;

use crate::common::as_root;

/// The kinds of link between servers, each at a loopback address of its own.
#[derive(Clone, Copy, Debug)]
pub enum Link {
    /// A physical standby streaming from its primary.
    Standby,
    /// The aggregator's subscriptions.
    Subscription,
    /// The servers a partition fault makes for itself: a standby promoted
    /// in a split brain, a subscriber cut from its publisher.
    Fault,
}

impl Link {
    pub const ALL: [Link; 3] = [Link::Standby, Link::Subscription, Link::Fault];

    pub fn address(self) -> &'static str {
        match self {
            Link::Standby => "127.77.0.1",
            Link::Subscription => "127.77.0.2",
            Link::Fault => "127.77.0.3",
        }
    }
}

/// What every server's `listen_addresses` says: 127.0.0.1 and each link's.
pub fn listen_addresses() -> String {
    let mut all = vec!["127.0.0.1"];
    all.extend(Link::ALL.map(Link::address));
    format!("listen_addresses = '{}'", all.join(", "))
}

/// A connection string to the server on `port` through `link`. A short
/// connect timeout: a connection tried during a cut gets no answer at all.
pub fn conninfo(link: Link, port: u16) -> String {
    format!("host={} port={port} user=postgres dbname=postgres connect_timeout=2", link.address())
}

/// The run's nftables table: a set of cut (address, port) pairs, and rules
/// that drop every packet to or from one of them.
pub struct Net {
    table: String,
}

/// One link of one server, cut until `Net::heal`.
#[derive(Debug)]
pub struct Cut {
    link: Link,
    port: u16,
}

impl Net {
    pub fn new() -> Net {
        let net = Net { table: format!("snowflake_campaign_{}", std::process::id()) };
        let t = &net.table;
        let out = net.nft(&format!(
            "add table inet {t}; add set inet {t} cut {{ type ipv4_addr . inet_service; }}; \
             add chain inet {t} output {{ type filter hook output priority 0; policy accept; }}; \
             add rule inet {t} output ip daddr . tcp dport @cut drop; \
             add rule inet {t} output ip saddr . tcp sport @cut drop"
        ));
        assert!(out.status.success(), "nft (the nftables package): {}", String::from_utf8_lossy(&out.stderr));
        net
    }

    /// Cuts the server on `port` off at `link`'s address.
    pub fn cut(&self, link: Link, port: u16) -> Cut {
        self.element("add", link, port);
        Cut { link, port }
    }

    pub fn heal(&self, cut: Cut) {
        self.element("delete", cut.link, cut.port);
    }

    fn element(&self, verb: &str, link: Link, port: u16) {
        let out = self.nft(&format!("{verb} element inet {} cut {{ {} . {port} }}", self.table, link.address()));
        assert!(out.status.success(), "nft {verb} element: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Runs nft commands (`;` between them), as root.
    fn nft(&self, commands: &str) -> Output {
        as_root("nft", &[commands])
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = self.nft(&format!("delete table inet {}", self.table));
    }
}
