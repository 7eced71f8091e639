//! When a learning run must stop: Ctrl-C, or the spend of this invocation past
//! `--max-cost` / `--max-tokens-total`. Checked before every call and watched while answers
//! are in flight; the run then ends with [`Stopped`](super::Stopped) and resumes on a rerun.

use super::{Learner, Stopped};
use crate::llm::{ChatModel, Embedder};

impl<M: ChatModel, J: ChatModel, E: Embedder> Learner<'_, M, J, E> {
    pub(super) fn stop_reason(&self) -> String {
        if *self.stop.borrow() {
            return "interrupted".into();
        }
        self.over_budget().unwrap_or_else(|| "stopped".into())
    }

    /// Why the spend is over a limit, if it is.
    fn over_budget(&self) -> Option<String> {
        let spend = (self.spend)();
        let tokens = spend.usage.prompt_tokens + spend.usage.completion_tokens;
        if let Some(max) = self.settings.max_tokens_total
            && tokens >= max
        {
            return Some(format!("--max-tokens-total {max} reached ({tokens} tokens spent)"));
        }
        if let (Some(max), Some(cost)) = (self.settings.max_cost_usd, spend.cost_usd)
            && cost >= max
        {
            return Some(format!("--max-cost {max} reached (about ${cost:.2} spent)"));
        }
        None
    }

    /// `Err(Stopped)` once Ctrl-C was pressed or a budget is reached.
    pub(super) fn check_budget(&self) -> anyhow::Result<()> {
        if *self.stop.borrow() || self.over_budget().is_some() {
            return Err(Stopped::new(self.stop_reason()).into());
        }
        Ok(())
    }

    /// Resolves when the run must stop (see [`Learner::check_budget`]).
    pub(super) fn stop_signal(&self) -> impl Future<Output = ()> + '_ {
        let mut stop = self.stop.clone();
        async move {
            loop {
                if *stop.borrow() || self.over_budget().is_some() {
                    return;
                }
                tokio::select! {
                    changed = stop.changed() => if changed.is_err() { std::future::pending::<()>().await },
                    () = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                }
            }
        }
    }
}
