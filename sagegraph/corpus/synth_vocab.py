"""Word lists of the synthetic film knowledge base (`synth_kb.py`).

Motifs are the textual constraints planted in film descriptions. Each has the word the description
uses and a paraphrase that avoids it, so a question asked with the paraphrase separates lexical
from dense retrieval.
"""

FIRST_NAMES = (
    "John Jon Jonathan Mary Marie Maria Anna Ana Hannah Peter Pieter Paul Paolo Laura Lara Michael Mikael Sarah Sara "
    "David Davide Elena Helena Thomas Tomas Julia Giulia James Jaime Sofia Sophia Daniel Daniele Clara Klara Martin "
    "Martina Lucas Luca Emma Emmi Oscar Oskar Nina Nika Victor Viktor Irene Irina Felix Alice Alicia Robert Roberta "
    "Samuel Samira Hugo Ingrid Kenji Yuki Amara Tariq Leila Omar Priya Ravi Chen Mei Diego Lucia Pablo Ines Kofi Ada "
    "Ivan Olga Nikolai Petra Lars Astrid Sean Siobhan Malik Zara"
).split()

LAST_NAMES = (
    "Miller Muller Moller Smith Smyth Schmidt Garcia Garza Rossi Russo Novak Nowak Kowalski Petrov Petrova Ivanova "
    "Andersen Anderson Johansson Jansen Janssen Dubois Durand Moreau Martin Bernard Leroy Fischer Fisher Weber Webber "
    "Wagner Becker Baker Hoffmann Hofman Koch Cook Richter Klein Wolf Wolfe Neumann Newman Schwarz Black Zimmermann "
    "Tanaka Suzuki Sato Watanabe Kim Park Lee Li Wang Zhang Liu Chen Singh Patel Sharma Okafor Mensah Diallo Ndiaye "
    "Haddad Nasser Costa Silva Santos Pereira Oliveira Lopez Lopes Hernandez Fernandez Fernandes Romero Navarro Ortega "
    "Brennan Byrne Murphy Kelly O'Brien O'Neill MacLeod McLeod Campbell Stewart Hughes Morgan Reyes Cruz Morales "
    "Lindqvist Lindgren Berg Bergman Holm Nilsen Nielsen Eriksen Hansen Virtanen Korhonen Horvath Szabo Toth Dvorak"
).split()

TITLE_ADJECTIVES = (
    "Silent Crimson Hollow Last Burning Frozen Distant Quiet Broken Golden Hidden Endless Restless Pale Bitter Wild "
    "Northern Southern Midnight Iron Glass Paper Velvet Scarlet Shallow Deep Lonely Secret Sleeping Falling Rising "
    "Forgotten Electric Invisible Savage Gentle Hungry Lucky Crooked Narrow"
).split()

TITLE_NOUNS = (
    "Harbor Harbour River Mountain Garden Station Mirror Orchard Lantern Kingdom Highway Island Desert Forest Winter "
    "Summer Signal Shadow Horizon Bridge Tower Empire Circus Archive Factory Valley Canyon Border Season Promise "
    "Ritual Witness Stranger Daughter Brother Engine Compass Frontier Voyage Chorus Anthem Theorem Paradox Labyrinth"
).split()

STUDIO_WORDS = (
    "Northlight Bluefield Redwood Silverline Ironbridge Moonstone Blackwater Greenhill Starfall Oakridge Riverside "
    "Lakeshore Sunburst Highgate Stonewall Brightwater Crossroads Westwind Eastgate Firefly Kingfisher Nightjar "
    "Longbow Copperleaf Saltmarsh Thornfield Wildrose Amberly Cobalt Meridian Solstice Equinox Harbinger Lodestar "
    "Marigold Nimbus Obsidian Pinnacle Quarry Rosewood"
).split()
STUDIO_SUFFIXES = "Pictures Films Studios Entertainment Productions Media Cinema Features".split()

GENRES = (
    "Drama Comedy Thriller Documentary Romance Horror Science-Fiction Animation Crime Adventure Fantasy Mystery War "
    "Western Musical Biography History Family Sport Noir Satire Experimental Disaster Martial-Arts"
).split()

COUNTRIES = (
    "France Germany Italy Spain Portugal Ireland Sweden Norway Denmark Finland Poland Hungary Czechia Greece Turkey "
    "Egypt Morocco Nigeria Ghana Senegal Kenya India Pakistan China Japan Korea Thailand Vietnam Indonesia Australia "
    "Canada Mexico Brazil Argentina Chile Colombia Peru Iran Israel Iceland"
).split()

FESTIVALS = (
    "Lisbon Toronto Busan Venice Rotterdam Locarno Sundance Marrakech Mumbai Sydney Reykjavik Havana Cairo Tallinn "
    "Karlovy Berlin Cannes Tribeca Sitges Annecy"
).split()
PRIZES = (
    "Best Picture|Best Director|Best Screenplay|Best Debut|Audience Award|Jury Prize|Best Cinematography|Best Score|"
    "Critics Prize|Best Ensemble"
).split("|")

PROFESSIONS = ("actor", "director", "screenwriter", "performer", "filmmaker")

# (word planted in descriptions, paraphrase that avoids the word)
MOTIFS = (
    ("lighthouse", "a coastal beacon tower"),
    ("submarine", "an underwater naval vessel"),
    ("heist", "an elaborate robbery"),
    ("violin", "a bowed string instrument"),
    ("chess", "a board game of kings and pawns"),
    ("volcano", "an erupting mountain"),
    ("orphanage", "a home for parentless children"),
    ("smuggler", "someone moving contraband across borders"),
    ("astronaut", "a space traveller"),
    ("beekeeper", "someone who tends honey-making insects"),
    ("vineyard", "a grape-growing estate"),
    ("shipwreck", "a sunken vessel"),
    ("blizzard", "a violent snowstorm"),
    ("tsunami", "a giant ocean wave"),
    ("circus", "a travelling big-top show"),
    ("monastery", "a cloister of monks"),
    ("counterfeit", "forged banknotes"),
    ("amnesia", "a loss of memory"),
    ("twins", "identical siblings"),
    ("wedding", "a marriage ceremony"),
    ("funeral", "a burial service"),
    ("election", "a vote for public office"),
    ("strike", "workers walking off the job"),
    ("pandemic", "a worldwide disease outbreak"),
    ("robot", "a mechanical humanoid"),
    ("dragon", "a fire-breathing reptile of legend"),
    ("ghost", "a restless spirit of the dead"),
    ("vampire", "a blood-drinking undead creature"),
    ("detective", "a private investigator"),
    ("journalist", "a newspaper reporter"),
    ("surgeon", "an operating-room doctor"),
    ("boxer", "a prizefighter in the ring"),
    ("marathon", "a long-distance footrace"),
    ("orchestra", "a symphony ensemble"),
    ("bakery", "a shop that makes bread"),
    ("casino", "a gambling hall"),
    ("prison", "a penitentiary"),
    ("kidnapping", "an abduction for ransom"),
    ("treasure", "a hidden hoard of gold"),
    ("map", "a chart of unknown lands"),
    ("train", "a railway journey"),
    ("airship", "a dirigible balloon craft"),
    ("desert", "endless sand dunes"),
    ("jungle", "a dense tropical rainforest"),
    ("glacier", "a slow river of ice"),
    ("island", "a remote patch of land surrounded by sea"),
    ("carnival", "a street festival with masks"),
    ("inheritance", "a contested family fortune"),
    ("divorce", "the end of a marriage"),
    ("refugee", "someone fleeing their homeland"),
    ("spy", "a secret intelligence agent"),
    ("assassin", "a hired killer"),
    ("cult", "a secretive religious sect"),
    ("pilgrimage", "a sacred journey on foot"),
    ("earthquake", "the ground shaking violently"),
    ("drought", "a long season without rain"),
    ("flood", "rising waters drowning a town"),
    ("mine", "an underground shaft for ore"),
    ("factory", "an industrial plant"),
    ("radio", "a broadcast over the airwaves"),
    ("typewriter", "a mechanical writing machine"),
    ("photograph", "an old snapshot"),
    ("telescope", "an instrument for watching the stars"),
    ("comet", "a streaking celestial visitor"),
    ("alien", "a visitor from another planet"),
    ("time travel", "journeys to the past and future"),
    ("dream", "visions while asleep"),
    ("puppet", "a marionette on strings"),
    ("mask", "a disguise over the face"),
    ("horse", "a galloping steed"),
    ("wolf", "a wild canine predator"),
    ("whale", "a giant marine mammal"),
    ("garden", "a cultivated plot of flowers"),
    ("library", "a hall of books"),
    ("museum", "a gallery of artefacts"),
    ("theatre", "a stage for live plays"),
    ("restaurant", "a dining establishment"),
    ("farm", "a rural homestead with crops"),
    ("lottery", "a winning ticket of chance"),
    ("letter", "a handwritten correspondence"),
)

ROLES = (
    "a retired teacher",
    "a young nurse",
    "an ambitious lawyer",
    "a grieving widow",
    "a small-town mechanic",
    "a disgraced officer",
    "a restless teenager",
    "an ageing musician",
    "a stubborn farmer",
    "a gifted student",
    "a travelling salesman",
    "a lonely architect",
    "a former soldier",
    "a cautious accountant",
    "an exiled poet",
)

PLOT_TEMPLATES = (
    "The story follows {role} whose life changes because of {motif}.",
    "At its heart is {role} drawn into a conflict involving {motif}.",
    "A central thread concerns {motif}, which {role} cannot ignore.",
    "Much of the second act revolves around {motif} and the choices it forces on {role}.",
    "Critics singled out the sequence built around {motif}.",
    "The film keeps returning to {motif}, a thread that binds {role} to the other characters.",
)

FILLER = (
    "The cinematography favours long takes and natural light.",
    "Its pacing is deliberate, letting silences carry much of the emotion.",
    "The score mixes orchestral themes with sparse electronic textures.",
    "Several scenes were improvised by the cast during rehearsals.",
    "The production design recreates the period with careful attention to detail.",
    "Early audiences responded strongly to the ending, which divided reviewers.",
    "The screenplay went through many drafts before shooting began.",
    "Much of the footage was shot on location over a single season.",
    "The editing alternates between two timelines until they finally meet.",
    "Its supporting cast includes several first-time performers.",
    "The dialogue is spare, and much of the story is told through images.",
    "Reviewers compared its visual style to the films of an earlier generation.",
    "The budget was modest, and the crew numbered fewer than forty people.",
    "A restored version was released years later with additional scenes.",
    "The title refers to an image that appears only in the final minutes.",
    "Its themes include memory, loyalty and the cost of ambition.",
    "The film was later adapted into a stage production.",
    "Festival screenings built word of mouth before its wider release.",
    "The lead performance was widely praised for its restraint.",
    "Its humour is dry, undercutting the darker moments of the plot.",
)
