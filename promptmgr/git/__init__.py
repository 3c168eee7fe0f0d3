"""Git for workspaces: every git command PromptManager runs goes through ``command.run_git``.

``urls`` decides which repository URLs may be cloned, ``credentials`` keeps access tokens
and deploy keys encrypted and hands them to git without a command line, ``repository``
clones or starts a project's repository, ``worktrees`` gives each conversation its own
worktree. Nothing here touches the database; ``promptmgr.services.git_workspace`` and
``promptmgr.services.worktrees`` do.
"""
