//! kos's bootstrap script as the guest runs it: the sourced parameters ([`env`]), the step list read
//! from the script itself ([`script`]) and each step's semantics ([`steps`]).

pub mod env;
pub mod script;
pub mod steps;
