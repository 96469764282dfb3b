/**
 * dpmagic-labextension: SQL highlighting in dpmagic's `%%dpquery` and `%%dpbatch` cells.
 *
 * A code cell whose source starts with `%%dpquery` or `%%dpbatch` gets the editor MIME type `text/x-sql`, so
 * JupyterLab's editor language registry (CodeMirror 6, `@codemirror/lang-sql`) highlights its body as SQL; any
 * other cell keeps the notebook's kernel language.  The same approach as jupysql-plugin's `%%sql` cells.  It runs
 * in JupyterLab 4 and in Notebook 7 (both load this prebuilt federated extension, installed by `pip install`).
 *
 * The MIME type is re-applied whenever the cell's source changes and whenever the notebook resets the cells'
 * MIME type (for instance when the kernel's language info arrives).
 *
 * A second plugin tells each Python kernel which frontend shows it, so that the budget panel goes where it can be
 * seen: JupyterLab has a side panel (the `sidecar` package), Notebook 7 has none (the panel stays under the cell).
 * When a kernel becomes idle after starting or restarting, it runs one silent statement (no output, no history,
 * no execution count) that sets the environment variable `DPMAGIC_FRONTEND` to `lab` or `notebook`; dpmagic's
 * magics read it (dpmagic/presentation/magics/budget.py).  A kernel that has not been told shows the panel inline.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import { IEditorLanguageRegistry } from '@jupyterlab/codemirror';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

/** The cell magics whose body is SQL. */
export const SQL_MAGIC = /^\s*%%(dpquery|dpbatch)\b/;

/** The MIME type JupyterLab's language registry maps to CodeMirror's SQL language. */
export const SQL_MIME = 'text/x-sql';

/** The part of a cell model this extension uses (JupyterLab 4's ICodeCellModel). */
interface ICellModelLike {
  type: string;
  mimeType: string;
  sharedModel: { getSource(): string; changed: { connect(fn: () => void): void } };
  mimeTypeChanged: { connect(fn: () => void): void };
}

const watched = new WeakSet<object>();
let languages: IEditorLanguageRegistry;

function isSqlCell(model: ICellModelLike): boolean {
  return SQL_MAGIC.test(model.sharedModel.getSource());
}

function update(panel: NotebookPanel, model: ICellModelLike): void {
  if (model.type !== 'code') {
    return;
  }
  if (isSqlCell(model)) {
    const pending = model.mimeType;
    if (pending !== SQL_MIME) {
      // The editor starts loading the language of `pending` when it is set; setting SQL at once would race with
      // that load (the slower one wins).  Wait for the same load, then switch: the SQL language is applied last.
      void languages
        .getLanguage(pending)
        .catch(() => null)
        .then(() => {
          if (isSqlCell(model) && model.mimeType !== SQL_MIME) {
            model.mimeType = SQL_MIME;
          }
        });
    }
  } else if (model.mimeType === SQL_MIME) {
    // no longer a dpmagic SQL cell: back to the kernel's language
    model.mimeType = panel.content.codeMimetype;
  }
}

function watchCell(panel: NotebookPanel, model: ICellModelLike): void {
  if (watched.has(model)) {
    return;
  }
  watched.add(model);
  model.sharedModel.changed.connect(() => update(panel, model));
  // the notebook sets every code cell's MIME type to the kernel language's when the language info arrives
  model.mimeTypeChanged.connect(() => update(panel, model));
  update(panel, model);
}

function watchNotebook(panel: NotebookPanel): void {
  const connectModel = (): void => {
    const model = panel.content.model;
    if (!model || watched.has(model)) {
      return;
    }
    watched.add(model);
    for (let i = 0; i < model.cells.length; i++) {
      watchCell(panel, model.cells.get(i) as unknown as ICellModelLike);
    }
    model.cells.changed.connect((_, change) => {
      if (change.type === 'add' || change.type === 'set') {
        for (const cell of change.newValues) {
          watchCell(panel, cell as unknown as ICellModelLike);
        }
      }
    });
  };
  panel.content.modelChanged.connect(connectModel);
  void panel.context.ready.then(connectModel);
  connectModel();
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'dpmagic-labextension:sql-highlighting',
  description: 'SQL highlighting in %%dpquery and %%dpbatch cells',
  autoStart: true,
  requires: [INotebookTracker, IEditorLanguageRegistry],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker, registry: IEditorLanguageRegistry): void => {
    languages = registry;
    void registry.getLanguage(SQL_MIME).catch(() => null); // load CodeMirror's SQL language once, early
    tracker.forEach(panel => watchNotebook(panel));
    tracker.widgetAdded.connect((_, panel) => watchNotebook(panel));
    document.body.dataset.dpmagicLabextension = 'active';
  }
};

/** The frontend as dpmagic's magics name it: Notebook 7 ("Jupyter Notebook") or JupyterLab (anything else). */
export function frontendName(app: JupyterFrontEnd): 'lab' | 'notebook' {
  return /notebook/i.test(app.name) ? 'notebook' : 'lab';
}

/** The silent statement that tells a Python kernel its frontend (no names added to the user's namespace). */
export function frontendStatement(name: 'lab' | 'notebook'): string {
  return `__import__('os').environ.__setitem__('DPMAGIC_FRONTEND', '${name}')`;
}

const told = new WeakSet<Kernel.IKernelConnection>();

function tellKernel(context: ISessionContext, name: 'lab' | 'notebook'): void {
  const kernel = context.session?.kernel;
  if (!kernel || told.has(kernel) || kernel.status !== 'idle') {
    return;
  }
  void kernel.info
    .then(info => {
      if (info.language_info.name !== 'python' || told.has(kernel) || kernel.status !== 'idle') {
        return;
      }
      told.add(kernel);
      kernel.requestExecute(
        { code: frontendStatement(name), silent: true, store_history: false, stop_on_error: false },
        true
      );
    })
    .catch(() => undefined);
}

function watchKernel(panel: NotebookPanel, name: 'lab' | 'notebook'): void {
  const context = panel.sessionContext;
  context.statusChanged.connect((_, status) => {
    const kernel = context.session?.kernel;
    if (!kernel) {
      return;
    }
    if (status === 'starting' || status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      told.delete(kernel); // a new process: tell it again once it is idle
    } else if (status === 'idle') {
      tellKernel(context, name);
    }
  });
  void context.ready.then(() => tellKernel(context, name));
}

const frontendPlugin: JupyterFrontEndPlugin<void> = {
  id: 'dpmagic-labextension:frontend',
  description: "Tells Python kernels which frontend shows them (where dpmagic's budget panel can go)",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker): void => {
    const name = frontendName(app);
    tracker.forEach(panel => watchKernel(panel, name));
    tracker.widgetAdded.connect((_, panel) => watchKernel(panel, name));
    document.body.dataset.dpmagicFrontend = name;
  }
};

export default [plugin, frontendPlugin];
