//! What kos writes to a terminal. Reports are drawn without colour, and every control character in them is
//! shown escaped: their text comes from files, clouds and consoles kos does not control, and an escape
//! sequence in any of those must reach the user as text, never as a command to their terminal.

pub use kos_cluster::printable;

/// Draws reports without colour (the escaping below would otherwise break miette's own colour codes).
pub fn init() {
    let _ = miette::set_hook(Box::new(|_| {
        Box::new(miette::MietteHandlerOpts::new().color(false).build())
    }));
}

/// A report as text for stderr, control characters escaped.
pub fn report(r: &miette::Report) -> String {
    kos_cluster::escape_unprintable(&format!("{r:?}")).into_owned()
}

/// Text from outside for stdout, control characters escaped.
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    kos_cluster::escape_unprintable(text)
}
