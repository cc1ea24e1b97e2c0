//! One module per subcommand.

mod sim;

use crate::cli::{Cli, Command, SimCommand};

pub async fn run(cli: Cli) -> miette::Result<()> {
    match cli.command {
        Command::Sim {
            command: SimCommand::Serve(args),
        } => sim::serve(args).await,
    }
}
